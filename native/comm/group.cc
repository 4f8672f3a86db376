#include "comm/group.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "comm/p2p.h"

namespace ascent {
namespace comm {

const char* CollOpName(CollOp op) {
  switch (op) {
    case CollOp::kAllReduce: return "allReduce";
    case CollOp::kBroadcast: return "broadcast";
    case CollOp::kAllGather: return "allGather";
    case CollOp::kReduceScatter: return "reduceScatter";
    case CollOp::kAllToAll: return "allToAll";
    case CollOp::kAllToAllV: return "allToAllV";
    case CollOp::kBarrier: return "barrier";
    case CollOp::kSplit: return "split";
  }
  return "?";
}

const char* RedOpName(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kAvg: return "avg";
  }
  return "?";
}

std::string Fingerprint(const Desc& d) {
  std::string s = CollOpName(d.op);
  switch (d.op) {
    case CollOp::kBarrier:
    case CollOp::kSplit:
      return s + "()";
    case CollOp::kAllToAllV:
      return s + "(" + DTypeName(d.dtype) + ")";
    case CollOp::kAllReduce:
    case CollOp::kReduceScatter:
      return s + "(" + DTypeName(d.dtype) + ", count=" + std::to_string(d.count) + ", op=" + RedOpName(d.red) + ")";
    case CollOp::kBroadcast:
      return s + "(" + DTypeName(d.dtype) + ", count=" + std::to_string(d.count) + ", root=" + std::to_string(d.root) + ")";
    default:
      return s + "(" + DTypeName(d.dtype) + ", count=" + std::to_string(d.count) + ")";
  }
}

// ASCENT_COMM_MOVERS is declared in src/runtime/env.ts. Read here rather than passed
// from TS: it is process-wide and every rank of a group must agree on it.
int MoversFor(int nranks) {
  int movers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* v = std::getenv("ASCENT_COMM_MOVERS");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
      ThrowInvalidArgument(std::string("Expected a positive integer for ASCENT_COMM_MOVERS but received \"") + v +
                               "\". HINT: unset it (default: one mover per core) or set e.g. ASCENT_COMM_MOVERS=2.",
                           {Str("name", "ASCENT_COMM_MOVERS"), Str("value", v)});
    }
    movers = static_cast<int>(n);
  }
  return std::min(movers, nranks);
}

CommGroup::CommGroup(std::string id, int nranks, std::string trace_dir, std::vector<int> world_ranks, bool is_world)
    : id_(std::move(id)),
      nranks_(nranks),
      spin_(2u * nranks <= std::thread::hardware_concurrency() ? kSpin : 0),
      movers_(MoversFor(nranks)),
      trace_dir_(std::move(trace_dir)),
      world_ranks_(std::move(world_ranks)),
      is_world_(is_world),
      p2p_(new P2PState(nranks)),
      small_result_(static_cast<uint8_t*>(std::aligned_alloc(64, kSmallBytes))),
      created_ms_(WallMs()) {
  for (int r = 0; r < nranks; ++r) slots_.emplace_back(new Slot());
}

CommGroup::~CommGroup() { std::free(small_result_); }

// ---------------------------------------------------------------- barrier

void CommGroup::Barrier(const WaitSite& site, Clock::time_point deadline, const std::function<void()>* on_last,
                        bool departure) {
  Slot& me = slot(site.rank);
  uint64_t my_epoch = me.epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (aborted()) ThrowAborted(site.rank, site.seq, site.what);
  // Read the generation before arriving: it cannot advance until we arrive.
  // gen_ counts passes in steps of 2; abort sets bit 0 (so abort wakes waiters by
  // changing the word, and a pass that already happened is still told apart).
  uint32_t g = gen_.load(std::memory_order_acquire) >> 1;
  if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(nranks_)) {
    // acq_rel on the counter: every rank's posted descriptor is visible here.
    if (on_last) (*on_last)();
    // Aborted while on_last ran: the waiters already left (abort bit), so release
    // nobody and fail like them; on_last's result is discarded.
    if (aborted()) ThrowAborted(site.rank, site.seq, site.what);
    count_.store(0, std::memory_order_relaxed);
    gen_.fetch_add(2, std::memory_order_acq_rel);  // release: the reset above is visible to the released
    FutexWake(&gen_);
    return;
  }
  auto passed = [&] { return (gen_.load(std::memory_order_acquire) >> 1) != g; };
  WaitWord(&gen_, deadline, spin_, [&] { return passed() || aborted(); });
  // A barrier that completed wins over a later abort: at normal shutdown a peer may
  // finish, exit and abort the group before this thread gets to run again (the
  // collective itself completed for everyone).
  if (passed()) return;
  if (aborted()) {
    // Every rank passed the arrival barrier, so each is either moving data (maybe
    // into or out of this rank's buffers) or already here. Wait until all are here
    // before this rank's op ends and its buffers may return to the pool (a dead
    // rank's peers must not write into reused memory). Bounded: data phases are.
    if (departure) {
      auto all_here = [&] {
        for (int r = 0; r < nranks_; ++r) {
          if (slot(r).epoch.load(std::memory_order_acquire) < my_epoch) return false;
        }
        return true;
      };
      for (int i = 0; i < 10000 && !all_here(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ThrowAborted(site.rank, site.seq, site.what);
  }
  std::vector<int> arrived, missing;
  for (int r = 0; r < nranks_; ++r) {
    (slot(r).epoch.load(std::memory_order_acquire) >= my_epoch ? arrived : missing).push_back(r);
  }
  ThrowTimeout(site, arrived, missing,
               "every rank must issue the same collectives in the same order on this communicator; " +
                   WhoList(missing) + (missing.size() == 1 ? " has" : " have") + " not reached seq " +
                   std::to_string(site.seq) + " (see the last ops above).");
}

void CommGroup::WaitPrevious(const WaitSite& site, Clock::time_point deadline) {
  Slot& me = slot(site.rank);
  uint64_t want = site.seq - 1;
  auto done = [&] { return me.done_seq.load(std::memory_order_seq_cst) >= want; };
  if (done()) return;  // the usual case: one stream per communicator
  me.done_waiters.fetch_add(1, std::memory_order_seq_cst);
  WaitWord(&me.done_word, deadline, spin_, [&] { return done() || aborted(); });
  me.done_waiters.fetch_sub(1, std::memory_order_seq_cst);
  if (done()) return;
  if (aborted()) ThrowAborted(site.rank, site.seq, site.what);
  WaitSite s = site;
  s.phase = "waiting for this rank's previous collective #" + std::to_string(want) + " (on another stream)";
  ThrowTimeout(s, {}, {site.rank},
               "a rank's collectives on one communicator run in seq order; order the streams with events.");
}

void CommGroup::MarkDone(int rank, uint64_t seq) {
  Slot& s = slot(rank);
  // seq_cst store then load (Dekker with WaitPrevious): either the waiter sees the
  // new seq, or we see the waiter and wake it.
  s.done_seq.store(seq, std::memory_order_seq_cst);
  if (s.done_waiters.load(std::memory_order_seq_cst) != 0) Bump(&s.done_word);
}

// ---------------------------------------------------------------- abort

void CommGroup::WakeAll() {
  gen_.fetch_or(1, std::memory_order_acq_rel);
  FutexWake(&gen_);
  Bump(&join_word);
  Bump(&p2p_->word);
  for (auto& s : slots_) Bump(&s->done_word);
}

ErrorInfo CommGroup::Abort(ErrorInfo info, uint64_t seq, bool dump) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (aborted_.load(std::memory_order_acquire)) return cause_;
    cause_ = std::move(info);
    cause_seq_ = seq;
    if (!cause_.Find("communicator")) cause_.details.push_back(Str("communicator", id_));
    if (!cause_.Find("culpritWorldRanks")) cause_.details.push_back(Ints("culpritWorldRanks", {}));
    if (dump) {
      std::string path = WriteDump();
      if (!path.empty()) {
        dump_path_ = path;
        cause_.message += "\nFlight recorder: " + path + "\nHINT: run `ascent trace " + trace_dir_ + "` (`npx --no-install ascent trace ...` where Ascent is installed, `npm run ascent -- trace ...` in its clone)";
        cause_.details.push_back(Str("flightRecorder", path));
      } else {
        cause_.message += "\n(The flight recorder could not be written to " + trace_dir_ + ".)";
      }
    }
    aborted_.store(true, std::memory_order_release);
  }
  WakeAll();
  return cause();
}

ErrorInfo CommGroup::cause() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return cause_;
}

uint64_t CommGroup::cause_seq() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return cause_seq_;
}

std::string CommGroup::dump_path() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return dump_path_;
}

void CommGroup::ThrowAborted(int rank, uint64_t seq, const std::string& what) {
  ErrorInfo c;
  uint64_t cs;
  std::string dump;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    c = cause_;
    cs = cause_seq_;
    dump = dump_path_;
  }
  if (cs != 0 && cs == seq) throw AscentException(c);
  ErrorInfo e{kCommAborted,
              "Communicator " + short_id() + " was aborted, so " + Who(rank) + "'s " + what +
                  (seq != 0 && seq != kNoSeq ? " (seq " + std::to_string(seq) + ")" : "") +
                  " cannot run. Cause: " + c.message,
              {Str("communicator", id_), Num("rank", WorldRank(rank)), Num("seq", seq == kNoSeq ? 0 : static_cast<double>(seq)), Str("op", what),
               Str("causeCode", c.code), Str("causeMessage", c.message)}};
  if (!is_world_) e.details.push_back(Num("localRank", rank));
  if (!dump.empty()) e.details.push_back(Str("flightRecorder", dump));
  CopyCulprits(c, e);
  throw AscentException(std::move(e));
}

bool CommGroup::AnyInFlight() {
  for (auto& s : slots_) {
    if (s->recorder.in_flight() != 0) return true;
  }
  return false;
}

// ---------------------------------------------------------------- reports

std::string CommGroup::RankLines(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) {
    FlightRecorder& fr = slot(r).recorder;
    out += "\n  " + Who(r) + ": last enqueued " + fr.last_enqueued().Describe() + ", started " +
           fr.last_started().Describe() + ", completed " + fr.last_completed().Describe();
  }
  return out;
}

void CommGroup::ThrowTimeout(const WaitSite& site, const std::vector<int>& arrived, const std::vector<int>& missing,
                             const std::string& hint) {
  std::vector<int> all;
  for (int r = 0; r < nranks_; ++r) all.push_back(r);
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.0f", site.timeout_ms);
  std::string msg = "Collective timeout on communicator " + short_id() +
                    (site.seq ? " at seq " + std::to_string(site.seq) : std::string()) + ": " + site.what +
                    " on " + Who(site.rank) + " waited " + ms + " ms (" + site.timeout_name + ") in the " + site.phase +
                    ".";
  if (!arrived.empty()) msg += "\n  arrived: " + WhoList(arrived);
  if (!missing.empty()) msg += "\n  missing: " + WhoList(missing);
  msg += RankLines(all);
  msg += "\nHINT: " + hint;
  ErrorInfo info{kCollectiveTimeout, msg,
                 {Str("communicator", id_), Num("seq", static_cast<double>(site.seq)), Str("op", site.what),
                  Num("timeoutMs", site.timeout_ms), Num("rank", WorldRank(site.rank))}};
  if (!is_world_) info.details.push_back(Num("localRank", site.rank));
  AddRanks(info, "arrived", arrived);
  AddRanks(info, "missing", missing);
  // The ranks that did not arrive are at fault, not the ones that waited for them.
  SetCulprits(info, missing);
  Abort(std::move(info), site.seq == 0 ? kNoSeq : site.seq, true);
  ThrowAborted(site.rank, site.seq == 0 ? kNoSeq : site.seq, site.what);
}

// ---------------------------------------------------------------- table

GroupTable& GroupTable::Get() {
  static GroupTable* table = new GroupTable();
  return *table;
}

std::shared_ptr<CommGroup> GroupTable::Join(const std::string& id, int nranks, int rank, int device,
                                            const std::string& trace_dir, const std::vector<int>& world_ranks,
                                            bool is_world) {
  std::shared_ptr<CommGroup> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, std::weak_ptr<CommGroup>>> live;
    for (auto& e : groups_) {
      std::shared_ptr<CommGroup> p = e.second.lock();
      if (!p) continue;
      if (e.first == id) g = p;
      live.push_back(std::move(e));
    }
    groups_.swap(live);
    if (!g) {
      if (rank < 0 || rank >= nranks) {
        ThrowInvalidArgument("Expected rank in [0, " + std::to_string(nranks) + ") for communicator " +
                                 id.substr(0, 8) + "\u2026 but received " + std::to_string(rank) + ".",
                             {Num("rank", rank), Num("nranks", nranks)});
      }
      g = std::make_shared<CommGroup>(id, nranks, trace_dir, world_ranks, is_world);
      groups_.emplace_back(id, g);
    }
  }
  if (g->nranks() != nranks) {
    ThrowInvalidArgument("Rank " + std::to_string(rank) + " called initRank with nranks=" + std::to_string(nranks) +
                             " but an earlier rank of communicator " + g->short_id() + " said nranks=" +
                             std::to_string(g->nranks()) + ". HINT: every rank must pass the same nranks.",
                         {Num("rank", rank), Num("nranks", nranks), Num("expectedNranks", g->nranks())});
  }
  if (rank < 0 || rank >= nranks) {
    ThrowInvalidArgument("Expected rank in [0, " + std::to_string(nranks) + ") for communicator " + g->short_id() +
                             " but received " + std::to_string(rank) + ".",
                         {Num("rank", rank), Num("nranks", nranks)});
  }
  g->AddRank(rank, device);
  return g;
}

std::shared_ptr<CommGroup> GroupTable::Find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : groups_) {
    if (e.first == id) {
      if (auto p = e.second.lock()) return p;
    }
  }
  return nullptr;
}

// ---------------------------------------------------------------- rendezvous

void CommGroup::AddRank(int rank, int device) {
  {
    std::lock_guard<std::mutex> lock(join_mu_);
    Slot& s = slot(rank);
    if (s.joined) {
      ThrowInvalidArgument("Rank " + std::to_string(rank) + " joined communicator " + short_id() +
                               " twice (first from device " + std::to_string(s.device) + ", now from device " +
                               std::to_string(device) + "). HINT: give every rank a distinct rank number.",
                           {Num("rank", rank), Num("device", device), Num("firstDevice", s.device)});
    }
    if (aborted()) {
      ErrorInfo c = cause();
      ErrorInfo e{kCommAborted,
                  "Communicator " + short_id() + " was aborted before " + Who(rank) + " joined. Cause: " + c.message,
                  {Str("communicator", id_), Num("rank", WorldRank(rank)), Str("causeCode", c.code)}};
      CopyCulprits(c, e);
      throw AscentException(std::move(e));
    }
    s.joined = true;
    s.device = device;
    ++joined_;
  }
  Bump(&join_word);
}

std::vector<int> CommGroup::JoinedRanks() {
  std::lock_guard<std::mutex> lock(join_mu_);
  std::vector<int> out;
  for (int r = 0; r < nranks_; ++r) {
    if (slot(r).joined) out.push_back(r);
  }
  return out;
}

void CommGroup::WaitAllJoined(int rank, Clock::time_point deadline, double timeout_ms) {
  auto all = [&] {
    std::lock_guard<std::mutex> lock(join_mu_);
    return joined_ == nranks_;
  };
  WaitWord(&join_word, deadline, 0, [&] { return all() || aborted(); });
  if (all()) return;
  if (aborted()) ThrowAborted(rank, kNoSeq, "initRank");
  std::vector<int> joined = JoinedRanks(), missing;
  for (int r = 0, j = 0; r < nranks_; ++r) {
    if (j < static_cast<int>(joined.size()) && joined[j] == r) {
      ++j;
    } else {
      missing.push_back(r);
    }
  }
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.0f", timeout_ms);
  std::string msg = "Communicator init timed out on communicator " + short_id() + ": " + Who(rank) + " waited " + ms +
                    " ms (connectTimeoutMs / HCCL_CONNECT_TIMEOUT) but only " + std::to_string(joined.size()) + " of " +
                    std::to_string(nranks_) + " ranks joined.\n  joined: " + WhoList(joined) + "\n  missing: " +
                    WhoList(missing) + "\nHINT: " +
                    (is_world_ ? "every rank must call Communicator.initRank() with the same uniqueId and nranks; check that " +
                                     WhoList(missing) + " started and did not fail before init."
                               : "every member of a split must join the new communicator; check that " + WhoList(missing) +
                                     " did not fail or exit during the split.");
  ErrorInfo info{kCollectiveTimeout, msg, {Str("op", "initRank"), Num("timeoutMs", timeout_ms), Num("rank", WorldRank(rank))}};
  AddRanks(info, "joined", joined);
  AddRanks(info, "missing", missing);
  SetCulprits(info, missing);
  Abort(std::move(info), kNoSeq, true);
  ThrowAborted(rank, kNoSeq, "initRank");
}

}  // namespace comm
}  // namespace ascent
