// CommGroup: the state every rank of one communicator shares (process-global,
// reached by id through the rendezvous table). Per-rank slots hold the posted
// descriptor, barrier epochs, completion seq and the flight recorder; the group
// holds one small-message result buffer. One generation barrier (futex) orders the phases of every
// collective. abort() bumps every futex word, so any waiter wakes at once and
// throws the abort cause.
//
// Invariants:
// - Ranks run their collectives in seq order (an op waits for its rank's seq-1).
// - A rank writes slot.desc[s & 1] only before arriving at seq s's first barrier.
//   A peer reads it only between that barrier and its own arrival at seq s+1's
//   first barrier. Reaching seq s+2's write requires passing seq s+1's barrier,
//   which requires every peer to have arrived there, i.e. to be done reading seq s:
//   one barrier per collective is enough for descriptors.
// - The small-message result buffer is written only by the last rank to arrive at
//   a first barrier, while every other rank is still inside that barrier (so their
//   posted buffers are live), and read by every rank after it; the next write
//   happens only once every rank arrived at the next collective, i.e. finished
//   reading.
// - Once aborted, a group stays aborted; `cause` is final before `aborted` is set.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/descriptor.h"
#include "comm/flight_recorder.h"
#include "comm/futex.h"
#include "errors.h"

namespace ascent {
namespace comm {

// cause seq of errors not tied to one collective (init, P2P): every waiter of that
// kind rethrows the cause itself.
inline constexpr uint64_t kNoSeq = ~uint64_t{0};

// Results up to this size use the one-barrier algorithms (collectives.cc).
inline constexpr uint64_t kSmallBytes = 64 * 1024;

// Ranks that move the data of a large collective for the whole group
// (collectives.cc): min(nranks, ASCENT_COMM_MOVERS or the number of cores).
int MoversFor(int nranks);

struct Slot {
  Desc desc[2];
  std::atomic<uint64_t> epoch{0};     // barriers this rank has entered
  std::atomic<uint64_t> done_seq{0};  // last collective seq completed here
  std::atomic<uint32_t> done_word{0};
  std::atomic<uint32_t> done_waiters{0};  // MarkDone skips the wake syscall when 0
  bool joined = false;  // guarded by CommGroup::join_mu
  int device = -1;      // guarded by CommGroup::join_mu
  FlightRecorder recorder;
};

// What a waiter reports when its deadline passes.
struct WaitSite {
  int rank;
  uint64_t seq;             // 0 for P2P
  std::string what;         // "allReduce(fp32, count=4, op=sum)" or "send #2 to rank 1"
  std::string phase;        // "arrival barrier", ...
  double timeout_ms;
  // Which setting `timeout_ms` came from (split waits under the connect timeout).
  std::string timeout_name = "execTimeoutMs / HCCL_EXEC_TIMEOUT";
};

class P2PState;

class CommGroup {
 public:
  // `world_ranks[r]`: the world rank of local rank r (from the parent at split; the
  // identity for a communicator made by initRank, which is a world of its own).
  CommGroup(std::string id, int nranks, std::string trace_dir, std::vector<int> world_ranks, bool is_world);
  ~CommGroup();

  const std::string& id() const { return id_; }
  std::string short_id() const { return id_.substr(0, 8) + "\u2026"; }
  int nranks() const { return nranks_; }

  // --- rank naming (rank_names.cc): reports always give world ranks, and local
  // ones too on a sub-communicator (world rank 7 may be local rank 1 of a split).
  bool is_world() const { return is_world_; }
  int WorldRank(int local) const { return world_ranks_[local]; }
  std::vector<int> WorldRanks(const std::vector<int>& local) const;
  // "rank 3" on a world communicator, "world rank 7 (local 1)" on a sub-communicator.
  std::string Who(int local) const;
  // "rank 2" / "ranks [0,1,3]", or "world rank 7 (local 1)" / "world ranks [3,7] (local [0,1])".
  std::string WhoList(const std::vector<int>& local) const;
  // Adds details `key` (world ranks) and, on a sub-communicator, `key`Local.
  void AddRanks(ErrorInfo& info, const std::string& key, const std::vector<int>& local) const;
  // Adds culpritWorldRanks (the world ranks most likely at fault) to `info`.
  void SetCulprits(ErrorInfo& info, const std::vector<int>& local) const;
  // Pauses a waiter spins before sleeping: kSpin only when every rank's JS thread
  // and stream thread can have a core of their own, else 0.
  int spin() const { return spin_; }
  // Ranks 0..movers()-1 move the data of every large collective (collectives.cc).
  int movers() const { return movers_; }
  // The next unclaimed chunk of the current large collective: movers take chunks
  // from it; the last rank to arrive at the op's arrival barrier resets it (every
  // mover left the previous op's departure barrier by then).
  std::atomic<uint64_t>& next_chunk() { return next_chunk_; }
  Slot& slot(int r) { return *slots_[r]; }
  P2PState& p2p() { return *p2p_; }

  // --- rendezvous (rendezvous.cc) ---
  // Registers `rank`; InvalidArgument on duplicate rank. Non-blocking.
  void AddRank(int rank, int device);
  // Blocks until every rank joined; CollectiveTimeout (and abort) at the deadline.
  void WaitAllJoined(int rank, Clock::time_point deadline, double timeout_ms);
  std::vector<int> JoinedRanks();

  // --- barrier ---
  // Every rank must call it the same number of times. Throws the abort error, or
  // a CollectiveTimeout report (aborting the group) at the deadline. `on_last`
  // runs on the last rank to arrive, before anyone is released.
  // `departure`: peers may still be touching this rank's buffers until they arrive
  // here, so an abort does not release this rank before they did (bounded wait).
  void Barrier(const WaitSite& site, Clock::time_point deadline, const std::function<void()>* on_last = nullptr,
               bool departure = false);
  // kSmallBytes, 64-byte aligned (see the invariant above).
  uint8_t* small_result() const { return small_result_; }
  // Waits until `rank` completed collective seq-1 (ops of one rank may sit on
  // different streams).
  void WaitPrevious(const WaitSite& site, Clock::time_point deadline);
  void MarkDone(int rank, uint64_t seq);

  // --- abort ---
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // First caller wins: records the cause (for `seq`, 0 = not tied to a collective),
  // writes the flight-recorder dump when `dump`, appends its path to the message,
  // then wakes every waiter. Returns the final cause (the winner's).
  ErrorInfo Abort(ErrorInfo cause, uint64_t seq, bool dump);
  ErrorInfo cause();
  uint64_t cause_seq();
  std::string dump_path();
  // The error a rank sees for an op (`seq`, `what`) that could not complete because
  // the group is aborted: the cause itself when it was raised for this very seq,
  // else CommAborted naming the cause.
  [[noreturn]] void ThrowAborted(int rank, uint64_t seq, const std::string& what);
  // Any rank has an op enqueued but not finished.
  bool AnyInFlight();

  // --- reports ---
  // "  rank 2: last enqueued #6 allReduce, started #6 allReduce, completed #6 allReduce"
  std::string RankLines(const std::vector<int>& ranks);
  // Throws (after aborting) the CollectiveTimeout report for `site`.
  [[noreturn]] void ThrowTimeout(const WaitSite& site, const std::vector<int>& arrived, const std::vector<int>& missing,
                                 const std::string& hint);
  // JSON of every rank's flight recorder (format: dump.cc).
  std::string DumpJson();

  std::atomic<uint32_t> join_word{0};

 private:
  std::string WriteDump();       // abort_mu_ held
  std::string DumpJsonLocked();  // abort_mu_ held
  void WakeAll();

  const std::string id_;
  const int nranks_;
  const int spin_;
  const int movers_;
  const std::string trace_dir_;
  const std::vector<int> world_ranks_;
  const bool is_world_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<P2PState> p2p_;
  uint8_t* small_result_;

  std::mutex join_mu_;
  int joined_ = 0;

  std::atomic<uint32_t> count_{0};
  std::atomic<uint32_t> gen_{0};
  std::atomic<uint64_t> next_chunk_{0};

  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  ErrorInfo cause_;
  uint64_t cause_seq_ = 0;
  std::string dump_path_;
  double created_ms_;
};

// "[0, 1, 3]"
std::string RankList(const std::vector<int>& ranks);
// "rank 2" / "ranks [0, 1, 3]"
std::string RanksPhrase(const std::vector<int>& ranks);
// Copies the cause's culpritWorldRanks into `out` (empty when the cause has none).
void CopyCulprits(const ErrorInfo& cause, ErrorInfo& out);

// The process-global id -> group table: process-global on purpose, not per env,
// because the ranks of one group live in different workers and meet here (loaded
// with the addon in the main thread before any worker). Leaked on purpose, like
// the device registry: worker threads may outlive static destruction.
class GroupTable {
 public:
  static GroupTable& Get();
  // Finds or creates the group `id`; InvalidArgument when `nranks` disagrees with
  // an earlier joiner, or `rank` is out of range / already joined. `world_ranks`
  // (size nranks) and `is_world` are taken from the joiner that creates the group.
  std::shared_ptr<CommGroup> Join(const std::string& id, int nranks, int rank, int device, const std::string& trace_dir,
                                  const std::vector<int>& world_ranks, bool is_world);
  std::shared_ptr<CommGroup> Find(const std::string& id);

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, std::weak_ptr<CommGroup>>> groups_;
};

}  // namespace comm
}  // namespace ascent
