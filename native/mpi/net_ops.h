// Collectives among processes, run on the net thread (one call per process, by
// its leader rank) as flows that never block it (net_thread.h). Each first exchanges a fingerprint (sequence number, op,
// dtype, count, reduce op, root) so that processes calling different collectives
// fail with a mismatch naming them instead of exchanging garbage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net_thread.h"

namespace ascent_mpi {

// Dtype codes are Ascent's (src/runtime/device/dtype.ts DTYPE_CODE); reduce codes are comm.ts's.
// `commId` names the communicator among processes (0 = the world, others from netSplit).
// Each starts a flow on the net thread and returns `deferred`; `done` gets the result.
NetResult netAllReduce(void* buf, int64_t count, int dtype, int redop, int64_t timeoutMs, int commId, NetDone done);
NetResult netBroadcast(void* buf, int64_t nbytes, int rootProcess, int64_t timeoutMs, int commId, NetDone done);
// `kind` is the fingerprint's name (an allToAllV's count exchange says so in a mismatch).
NetResult netAllGather(const void* send, void* recv, int64_t nbytes, int64_t timeoutMs, int commId, int64_t kind, NetDone done);
NetResult netBarrier(int64_t timeoutMs, int commId, NetDone done);
// Block p of send goes to process p; block p of recv comes from process p.
NetResult netAllToAll(const void* send, void* recv, int64_t blockBytes, int64_t timeoutMs, int commId, NetDone done);
// recv (blockCount elements) = block `rank` of op over every process's send (size x blockCount).
NetResult netReduceScatter(const void* send, void* recv, int64_t blockCount, int dtype, int redop, int64_t timeoutMs, int commId, NetDone done);

// Point-to-point (net_p2p.cc): posted at once, completed later by the net thread (`done`).
// The data is staged, so the caller's buffer may go as soon as the op ran (send) or until done (recv).
NetResult netSend(const void* buf, int64_t nbytes, int peer, int tag, int64_t timeoutMs, int commId, NetDone done);
NetResult netRecv(void* buf, int64_t nbytes, int peer, int tag, int64_t timeoutMs, int commId, NetDone done);

// Split (net_split.cc): for each color of `colors` (ascending, the same list on every
// process of `parentId`), a communicator of the processes whose `member` flag is set;
// registered under "<keyPrefix>:<color>" (NetThread::lookupComm).
NetResult netSplit(int parentId, const std::vector<int>& colors, const std::vector<uint8_t>& member, const std::string& keyPrefix, int64_t timeoutMs,
                   NetDone done);

}  // namespace ascent_mpi
