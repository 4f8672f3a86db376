// Helpers shared by the ops among processes (net_ops.cc, net_p2p.cc, net_split.cc):
// readiness, the fingerprint exchange and Ascent's dtype / reduce codes in MPI terms.
#pragma once

#include <cstdint>
#include <string>

#include "net_thread.h"

namespace ascent_mpi {

// Fingerprint kinds (the names appear in mismatch reports).
enum Kind : int64_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kBarrier = 4,
  kAllToAll = 5,
  kReduceScatter = 6,
  kSplit = 7,
  kAllToAllVCounts = 8,
};
const char* kindName(int64_t k);

// Null when communicator `id` is ready; else sets `r` (not initialized, unknown id, aborted).
NetComm* ready(const char* what, int id, NetResult& r);

// Every process of a communicator must call the same collective with the same shape, in the
// same order: a collective is a flow whose first request exchanges the fingerprint (sequence
// number, kind, dtype, count, reduce op / root); a mismatch fails it on every process, naming
// them; else `post` starts the data op (`postWhat` in reports). When the data op's request
// completed, `finish` (if any) gives the op's result. Returns `deferred` (or an error).
NetResult startCollective(int commId, const char* what, int64_t kind, int64_t dtype, int64_t count, int64_t extra, int64_t timeoutMs,
                          std::function<NetResult(NetComm&, MPI_Request*)> post, std::string postWhat, NetDone done,
                          std::function<NetResult()> finish = nullptr);

// No error when MPI started the request; else what failed to start.
NetResult started(int rc, const std::string& what);

NetResult bad(const std::string& msg);
MPI_Datatype mpiType(int dtype);
MPI_Op mpiOp(int redop);

}  // namespace ascent_mpi
