// Collectives among processes, run on the net thread (one call per process, by
// its leader rank). Each first exchanges a fingerprint (sequence number, op,
// dtype, count, reduce op, root) so that processes calling different collectives
// fail with a mismatch naming them instead of exchanging garbage.
#pragma once

#include <cstdint>

#include "net_thread.h"

namespace ascent_mpi {

// Dtype codes are Ascent's (src/runtime/device/dtype.ts DTYPE_CODE); reduce codes are comm.ts's.
NetResult netAllReduce(void* buf, int64_t count, int dtype, int redop, int64_t timeoutMs);
NetResult netBroadcast(void* buf, int64_t nbytes, int rootProcess, int64_t timeoutMs);
NetResult netAllGather(const void* send, void* recv, int64_t nbytes, int64_t timeoutMs);
NetResult netBarrier(int64_t timeoutMs);

}  // namespace ascent_mpi
