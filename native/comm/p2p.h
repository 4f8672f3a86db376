// Point-to-point transport between ranks of one communicator. The k-th send from a
// to b matches the k-th recv on b from a (k counted per ordered pair at enqueue
// time). A sender posts {k, pointer, size} on the (a -> b) channel and waits until
// the receiver has copied straight out of its device buffer (zero copy between
// threads, no staging); the receiver waits for post k, checks it matches, copies,
// and marks it consumed. A group (groupStart/groupEnd) posts all its sends before
// it waits on anything, so exchanges cannot deadlock. Plain (ungrouped) ops record
// what they block on; a wait-for cycle among blocked plain ops is a certain
// deadlock (each stream runs one op at a time) and raises P2PDeadlockError.
//
// All P2P state of a group sits under one mutex; waits block on one futex word that
// every state change (and abort) bumps. P2P is not on the bandwidth-critical path.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "comm/futex.h"
#include "kernels/dtype.h"

namespace ascent {
namespace comm {

class CommGroup;

struct P2PItem {
  bool is_send;
  int peer;
  uint64_t k;  // 1-based index of this op among rank->peer sends (or peer->rank recvs)
  uint8_t* ptr;
  uint64_t count;
  DType dtype;
};

struct SendPost {
  uint64_t k;
  const uint8_t* ptr;
  uint64_t count;
  DType dtype;
  bool claimed = false;   // a receiver is copying
  bool consumed = false;  // the sender may go
  bool failed = false;    // consumed by a receiver that found a mismatch
};

class P2PState {
 public:
  explicit P2PState(int nranks);
  std::atomic<uint32_t> word{0};

  // Runs `items` of `rank` (one plain op, or a whole group in call order): posts
  // every send, performs every recv, then waits until every send was consumed.
  // Throws the abort error, P2P mismatch, deadlock or timeout (aborting `g`).
  void Run(CommGroup& g, int rank, const std::vector<P2PItem>& items, bool grouped, Clock::time_point deadline,
           double timeout_ms, const std::string& what);

 private:
  struct Blocked {
    enum Kind { kNone, kSend, kRecv, kGroup } kind = kNone;
    int peer = -1;
    uint64_t k = 0;
  };
  std::deque<SendPost>& Chan(int from, int to) { return chans_[static_cast<size_t>(from) * nranks_ + to]; }
  SendPost* FindPost(int from, int to, uint64_t k);
  // Under mu_: true when the wait of `r` is still a real edge of the wait-for graph.
  bool EdgeLive(int r);
  // Under mu_: the cycle through `rank`, or empty.
  std::vector<int> FindCycle(int rank);

  const int nranks_;
  std::mutex mu_;
  std::vector<std::deque<SendPost>> chans_;
  std::vector<Blocked> blocked_;
};

}  // namespace comm
}  // namespace ascent
