// The collective algorithms. Each is written once against three primitives: the
// group barrier, direct access to peers' posted device pointers (reads and, for
// large ops, writes into peers' outputs), and Reduce(). Every collective runs the
// same frame (RunCollective):
//   0. wait until this rank's previous collective completed (seq order);
//   1. prepare (snapshot in-place all-to-all inputs) and post the descriptor to
//      this rank's slot;
//   2. arrival barrier (deadline = exec timeout); for results up to kSmallBytes the
//      last rank to arrive builds the whole result before releasing the others;
//   3. compare every rank's fingerprint: any difference -> CollectiveMismatchError
//      on every rank, naming both fingerprints and which ranks hold each;
//   4. move the data (small results: copy out of the group buffer; large ones: only
//      the movers, ranks 0..movers-1, move the whole op for every rank);
//   5. departure barrier where a peer may still read (or write) this rank's buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.h"

namespace ascent {
namespace comm {

struct SplitResult {
  int color = -1;
  int new_rank = -1;
  int new_size = 0;
  std::vector<int> member_world_ranks;  // world rank of each new local rank
};

// `timeout_name`: the setting the deadline came from, for the timeout report.
void RunCollective(CommGroup& g, int rank, Desc& d, Clock::time_point deadline, double timeout_ms,
                   SplitResult* split = nullptr, const char* timeout_name = "execTimeoutMs / HCCL_EXEC_TIMEOUT");

}  // namespace comm
}  // namespace ascent
