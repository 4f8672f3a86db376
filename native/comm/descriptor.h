// What one rank posts for one collective: the op and its arguments (the
// fingerprint every rank compares before data moves) and the device pointers its
// peers access directly. Copied by value into the rank's slot (double-buffered by
// seq parity, see group.h), so peers never read memory owned by a finished op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace ascent {
namespace comm {

enum class CollOp : int { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll, kAllToAllV, kBarrier, kSplit };
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

const char* CollOpName(CollOp op);
const char* RedOpName(RedOp op);

struct Desc {
  CollOp op = CollOp::kBarrier;
  DType dtype = DType::kF32;
  uint64_t count = 0;  // per rank, NCCL convention
  RedOp red = RedOp::kSum;
  int root = -1;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  // allToAllV, in elements; sized nranks.
  std::vector<uint64_t> send_counts, send_displs, recv_counts, recv_displs;
  // split
  int color = -1;
  int key = 0;
  uint64_t seq = 0;
  std::string fingerprint;  // e.g. "allReduce(fp32, count=1024, op=sum)"
};

// The fingerprint of `d`: op, dtype, count, reduce op, root (the communicator is
// implied by the group). Per-rank arguments that may legitimately differ
// (allToAllV counts, split color/key) are not part of it.
std::string Fingerprint(const Desc& d);

}  // namespace comm
}  // namespace ascent
