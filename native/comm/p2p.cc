#include "comm/p2p.h"

#include <algorithm>
#include <cstring>

#include "comm/group.h"

namespace ascent {
namespace comm {

P2PState::P2PState(int nranks)
    : nranks_(nranks), chans_(static_cast<size_t>(nranks) * nranks), blocked_(static_cast<size_t>(nranks)) {}

SendPost* P2PState::FindPost(int from, int to, uint64_t k) {
  for (SendPost& p : Chan(from, to)) {
    if (p.k == k) return &p;
  }
  return nullptr;
}

bool P2PState::EdgeLive(int r) {
  const Blocked& b = blocked_[r];
  if (b.kind == Blocked::kSend) {
    SendPost* p = FindPost(r, b.peer, b.k);
    return p != nullptr && !p->claimed;
  }
  if (b.kind == Blocked::kRecv) return FindPost(b.peer, r, b.k) == nullptr;
  return false;  // not blocked, or a group (waits on several peers: not followed)
}

std::vector<int> P2PState::FindCycle(int rank) {
  std::vector<int> path{rank};
  std::vector<bool> seen(static_cast<size_t>(nranks_), false);
  seen[rank] = true;
  int x = rank;
  while (EdgeLive(x)) {
    int next = blocked_[x].peer;
    if (next == rank) return path;
    if (seen[next]) return {};
    seen[next] = true;
    path.push_back(next);
    x = next;
  }
  return {};
}

namespace {

std::string Describe(const CommGroup& g, bool is_send, int peer, uint64_t k) {
  return is_send ? "send #" + std::to_string(k) + " to " + g.Who(peer)
                 : "recv #" + std::to_string(k) + " from " + g.Who(peer);
}

}  // namespace

void P2PState::Run(CommGroup& g, int rank, const std::vector<P2PItem>& items, bool grouped,
                   Clock::time_point deadline, double timeout_ms, const std::string& what) {
  // Blocks until ready() (evaluated under mu_) or throws; `edge` is what we block on.
  // Drops our unclaimed posts (so no receiver copies from a buffer we stop
  // guarding) and tells whether one is claimed (a receiver is copying from it: we
  // must wait for it to finish even after an abort).
  auto retract = [&]() {
    bool claimed = false;
    for (const P2PItem& it : items) {
      if (!it.is_send) continue;
      auto& ch = Chan(rank, it.peer);
      for (auto p = ch.begin(); p != ch.end();) {
        if (p->k == it.k && !p->claimed) {
          p = ch.erase(p);  // nobody holds references into the deque (see Step 2)
        } else {
          claimed = claimed || (p->k == it.k && p->claimed && !p->consumed);
          ++p;
        }
      }
    }
    return claimed;
  };
  // Blocks until ready() (evaluated under mu_) or throws; `edge` is what we block on.
  // A wait that is already satisfied wins over an abort (a peer may finish, exit
  // and abort the group at normal shutdown before this thread runs again).
  auto wait = [&](Blocked edge, const std::string& waiting_for, auto&& ready) {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      if (ready()) {
        blocked_[rank] = Blocked{};
        return;
      }
      if (g.aborted() && !retract()) {
        blocked_[rank] = Blocked{};
        lock.unlock();
        g.ThrowAborted(rank, kNoSeq, what);
      }
      blocked_[rank] = grouped ? Blocked{Blocked::kGroup, -1, 0} : edge;
      if (!grouped) {
        std::vector<int> cycle = FindCycle(rank);
        if (!cycle.empty()) {
          std::string chain;
          for (int x : cycle) {
            const Blocked& b = blocked_[x];
            chain += "\n  " + g.Who(x) + " is blocked in " + Describe(g, b.kind == Blocked::kSend, b.peer, b.k) +
                     (b.kind == Blocked::kSend ? " (no matching recv posted)" : " (no matching send posted)");
          }
          blocked_[rank] = Blocked{};
          retract();
          lock.unlock();
          std::vector<int> sorted = cycle;
          std::sort(sorted.begin(), sorted.end());
          ErrorInfo info{kP2PDeadlock,
                         "P2P deadlock on communicator " + g.short_id() + ": " + g.WhoList(sorted) +
                             " wait for each other in a cycle:" + chain +
                             "\nHINT: wrap the exchange in comm.groupStart() / comm.groupEnd() so every send is "
                             "posted before anything waits, or order send/recv oppositely on the two sides.",
                         {Num("rank", g.WorldRank(rank))}};
          g.AddRanks(info, "cycle", cycle);
          g.SetCulprits(info, sorted);  // every rank of the cycle blocks the next one
          g.Abort(std::move(info), kNoSeq, true);
          g.ThrowAborted(rank, kNoSeq, what);
        }
      }
      uint32_t w = word.load(std::memory_order_acquire);
      lock.unlock();
      if (!FutexWait(&word, w, deadline)) {
        std::lock_guard<std::mutex> relock(mu_);
        if (ready()) {
          blocked_[rank] = Blocked{};
          return;
        }
        if (g.aborted()) continue;
        retract();
        blocked_[rank] = Blocked{};
        // fallthrough to the report below, outside the lock
      } else {
        continue;
      }
      WaitSite site{rank, 0, what, "wait for " + waiting_for, timeout_ms};
      std::vector<int> missing;
      if (edge.peer >= 0) missing.push_back(edge.peer);
      g.ThrowTimeout(site, {rank}, missing,
                     waiting_for + " did not happen; each send needs the matching recv on the peer (the k-th send "
                                   "a->b matches the k-th recv on b from a).");
    }
  };

  // Step 1: post every send (a group posts all of them before it waits on anything).
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const P2PItem& it : items) {
      if (it.is_send) Chan(rank, it.peer).push_back(SendPost{it.k, it.ptr, it.count, it.dtype});
    }
  }
  Bump(&word);

  // Step 2: every recv, in call order: wait for the matching post, check it, copy
  // straight from the sender's buffer, mark it consumed.
  for (const P2PItem& it : items) {
    if (it.is_send) continue;
    const uint8_t* src = nullptr;
    uint64_t count = 0;
    DType dtype = it.dtype;
    wait(Blocked{Blocked::kRecv, it.peer, it.k},
         g.Who(it.peer) + " to post send #" + std::to_string(it.k) + " to " + g.Who(rank),
         [&] {
           SendPost* p = FindPost(it.peer, rank, it.k);
           if (p == nullptr) return false;
           p->claimed = true;
           src = p->ptr;
           count = p->count;
           dtype = p->dtype;
           return true;
         });
    if (count != it.count || dtype != it.dtype) {

      ErrorInfo info{kCollectiveMismatch,
                     "P2P mismatch on communicator " + g.short_id() + ": " + g.Who(it.peer) + "'s " +
                         Describe(g, true, rank, it.k) + " is " + DTypeName(dtype) + " count=" + std::to_string(count) +
                         " but " + g.Who(rank) + "'s " + Describe(g, false, it.peer, it.k) + " is " +
                         DTypeName(it.dtype) + " count=" + std::to_string(it.count) +
                         ".\nHINT: the k-th send a->b must match the k-th recv on b from a in dtype and count.",
                     {Num("sender", g.WorldRank(it.peer)), Num("receiver", g.WorldRank(rank)),
                      Num("k", static_cast<double>(it.k))}};
      if (!g.is_world()) {
        info.details.push_back(Num("senderLocal", it.peer));
        info.details.push_back(Num("receiverLocal", rank));
      }
      // Two sides, no majority: both are suspects.
      g.SetCulprits(info, it.peer < rank ? std::vector<int>{it.peer, rank} : std::vector<int>{rank, it.peer});
      g.Abort(std::move(info), kNoSeq, true);
      {
        std::lock_guard<std::mutex> lock(mu_);
        SendPost* p = FindPost(it.peer, rank, it.k);
        p->consumed = p->failed = true;  // releases the sender into the abort
      }
      Bump(&word);
      g.ThrowAborted(rank, kNoSeq, what);
    }
    if (count != 0) std::memcpy(it.ptr, src, count * DTypeSize(dtype));
    {
      std::lock_guard<std::mutex> lock(mu_);
      FindPost(it.peer, rank, it.k)->consumed = true;
    }
    Bump(&word);
  }

  // Step 3: wait until every send of ours was consumed (the receiver read our
  // buffer), then drop the consumed posts from the channel heads.
  for (const P2PItem& it : items) {
    if (!it.is_send) continue;
    wait(Blocked{Blocked::kSend, it.peer, it.k},
         g.Who(it.peer) + " to post recv #" + std::to_string(it.k) + " from " + g.Who(rank),
         [&] {
           SendPost* p = FindPost(rank, it.peer, it.k);
           if (p != nullptr && (!p->consumed || p->failed)) return false;  // null: consumed and already dropped
           auto& ch = Chan(rank, it.peer);
           while (!ch.empty() && ch.front().consumed) ch.pop_front();
           return true;
         });
  }
}

}  // namespace comm
}  // namespace ascent
