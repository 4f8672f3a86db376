#include "comm/collectives.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "comm/copy.h"
#include "comm/reduce.h"

namespace ascent {
namespace comm {
namespace {

struct Ctx {
  CommGroup& g;
  int rank;
  int P;
  Desc& d;
  size_t es;    // element size
  int parity;   // seq & 1: which descriptor of each slot
  WaitSite site;
  Clock::time_point deadline;

  const Desc& peer(int q) { return g.slot(q).desc[parity]; }
  void Barrier(const char* phase, bool departure = false) {
    site.phase = phase;
    g.Barrier(site, deadline, nullptr, departure);
  }
};

// Whether the op's whole result fits the group's result buffer (one-barrier path).
bool IsSmall(const Desc& d, int P) {
  const uint64_t bytes = d.count * DTypeSize(d.dtype);
  uint64_t r = 0;
  switch (d.op) {
    case CollOp::kAllReduce:
    case CollOp::kBroadcast: r = bytes; break;
    case CollOp::kAllGather:
    case CollOp::kReduceScatter: r = bytes * P; break;
    default: return false;
  }
  return r <= kSmallBytes;
}

// Step 3.
void CheckFingerprints(Ctx& c) {
  bool same = true;
  for (int q = 0; q < c.P; ++q) same = same && c.peer(q).fingerprint == c.d.fingerprint;
  if (same) return;
  // Group ranks by what they called; the largest group first (ties: lowest rank).
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int q = 0; q < c.P; ++q) {
    const std::string& fp = c.peer(q).fingerprint;
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == fp; });
    if (it == groups.end()) {
      groups.push_back({fp, {q}});
    } else {
      it->second.push_back(q);
    }
  }
  // Groups were made in rank order, so on a tie for the largest the stable sort
  // keeps the one holding the lowest rank first: that call is the reference, and
  // every rank outside it is a culprit (with no majority, the lowest rank decides).
  std::stable_sort(groups.begin(), groups.end(),
                   [](auto& a, auto& b) { return a.second.size() > b.second.size(); });
  std::vector<int> culprits;
  for (size_t i = 1; i < groups.size(); ++i) culprits.insert(culprits.end(), groups[i].second.begin(), groups[i].second.end());
  std::sort(culprits.begin(), culprits.end());
  const bool tie = groups[1].second.size() == groups[0].second.size();
  std::string msg = "Collective mismatch on communicator " + c.g.short_id() + " at seq " + std::to_string(c.d.seq) +
                    ": " + c.g.WhoList(groups[0].second) + " called " + groups[0].first;
  for (size_t i = 1; i < groups.size(); ++i) {
    msg += std::string(i == 1 ? " but " : ", and ") + c.g.WhoList(groups[i].second) + " called " + groups[i].first;
  }
  msg += ".\n  differs: " + c.g.WhoList(culprits) +
         (tie ? " (no majority: the call of the lowest rank is taken as the reference)" : " (the majority called " +
                                                                                             groups[0].first + ")");
  msg += "\nHINT: every rank must issue the same collectives, with the same dtype, count, reduce op and root, in "
         "the same order on a communicator.";
  ErrorInfo info{kCollectiveMismatch, msg,
                 {Num("seq", static_cast<double>(c.d.seq)), Str("expected", groups[0].first),
                  Str("actual", groups[1].first)}};
  c.g.AddRanks(info, "expectedRanks", groups[0].second);
  c.g.AddRanks(info, "actualRanks", groups[1].second);
  c.g.SetCulprits(info, culprits);
  c.g.Abort(std::move(info), c.d.seq, true);
  c.g.ThrowAborted(c.rank, c.d.seq, c.d.fingerprint);
}

// allToAllV: rank q's sendCounts[r] must equal rank r's recvCounts[q]. The report
// names the first pair that disagrees; the culprits are the ranks that take part in
// the most disagreeing pairs (one bad pair: both of its ranks).
void CheckAllToAllVCounts(Ctx& c) {
  std::vector<int> involved(c.P, 0);
  int bad_q = -1, bad_r = -1;
  for (int q = 0; q < c.P; ++q) {
    for (int r = 0; r < c.P; ++r) {
      if (c.peer(q).send_counts[r] == c.peer(r).recv_counts[q]) continue;
      if (bad_q < 0) bad_q = q, bad_r = r;
      ++involved[q];
      if (r != q) ++involved[r];
    }
  }
  if (bad_q < 0) return;
  const int q = bad_q, r = bad_r;
  const uint64_t s = c.peer(q).send_counts[r], rc = c.peer(r).recv_counts[q];
  const int most = *std::max_element(involved.begin(), involved.end());
  std::vector<int> culprits;
  for (int x = 0; x < c.P; ++x) {
    if (involved[x] == most) culprits.push_back(x);
  }
  ErrorInfo info{kCollectiveMismatch,
                 "Collective mismatch on communicator " + c.g.short_id() + " at seq " + std::to_string(c.d.seq) +
                     ": allToAllV counts disagree: " + c.g.Who(q) + " sends " + std::to_string(s) + " elements to " +
                     c.g.Who(r) + " (sendCounts[" + std::to_string(r) + "]) but " + c.g.Who(r) + " expects " +
                     std::to_string(rc) + " from " + c.g.Who(q) + " (recvCounts[" + std::to_string(q) + "])." +
                     "\n  suspects: " + c.g.WhoList(culprits) +
                     "\nHINT: rank q's sendCounts[r] must equal rank r's recvCounts[q] for every pair.",
                 {Num("seq", static_cast<double>(c.d.seq)), Num("sender", c.g.WorldRank(q)),
                  Num("receiver", c.g.WorldRank(r)), Num("sendCount", static_cast<double>(s)),
                  Num("recvCount", static_cast<double>(rc))}};
  if (!c.g.is_world()) {
    info.details.push_back(Num("senderLocal", q));
    info.details.push_back(Num("receiverLocal", r));
  }
  c.g.SetCulprits(info, culprits);
  c.g.Abort(std::move(info), c.d.seq, true);
  c.g.ThrowAborted(c.rank, c.d.seq, c.d.fingerprint);
}

// ---------------------------------------------------------------- algorithms (step 4-5)

// Small messages, one barrier. The last rank to arrive builds the whole result in
// the group's result buffer straight from every rank's posted input (all of them
// are live: everyone else is inside the barrier), before releasing anyone; then
// each rank copies its part out. One reduction per collective (deterministic), P x
// less traffic than every rank reducing everything, and no departure barrier.
void BuildSmallResult(Ctx& c) {
  for (int q = 0; q < c.P; ++q) {
    if (c.peer(q).fingerprint != c.d.fingerprint) return;  // step 3 reports it on every rank
  }
  uint8_t* out = c.g.small_result();
  const uint64_t bytes = c.d.count * c.es;
  std::vector<const uint8_t*> in(c.P);
  for (int q = 0; q < c.P; ++q) in[q] = c.peer(q).send;
  switch (c.d.op) {
    case CollOp::kAllReduce: Reduce(out, in.data(), c.P, c.d.count, c.d.dtype, c.d.red, c.P); break;
    case CollOp::kReduceScatter: Reduce(out, in.data(), c.P, c.d.count * c.P, c.d.dtype, c.d.red, c.P); break;
    case CollOp::kBroadcast: std::memcpy(out, in[c.d.root], bytes); break;
    case CollOp::kAllGather:
      for (int q = 0; q < c.P; ++q) std::memcpy(out + q * bytes, in[q], bytes);
      break;
    default: break;
  }
}

void CopySmallResult(Ctx& c) {
  const uint64_t bytes = c.d.count * c.es;
  const uint8_t* res = c.g.small_result();
  switch (c.d.op) {
    case CollOp::kAllReduce:
    case CollOp::kBroadcast: std::memcpy(c.d.recv, res, bytes); break;
    case CollOp::kAllGather: std::memcpy(c.d.recv, res, bytes * c.P); break;
    case CollOp::kReduceScatter: std::memcpy(c.d.recv, res + c.rank * bytes, bytes); break;
    default: break;
  }
}

// ---- large collectives: a few movers do the work of every rank
//
// After the arrival barrier every rank's buffers are posted, so any rank can move
// any rank's data. Only ranks 0..M-1 do (M = g.movers(): one per core by default):
// the op's whole data range is cut into M x kChunksPerMover contiguous chunks (whole
// cache lines), each mover claims chunks one by one and moves each for EVERY rank,
// while the other ranks sleep in the departure barrier. With P ranks time-sliced on
// fewer cores, P movers would each stream from up to P sources at once and be
// preempted mid-stream; M = cores movers are not.
// Measured (16 ranks, 2 cores, 64 MiB, loaded machine): allGather ~30% faster, as
// each source block is read once and fanned out to every output from L1; allReduce
// and reduceScatter within noise of P movers (both are memory-bandwidth bound:
// ~20-25 GB/s here, which one or two threads already saturate).
//
// Invariants (they make every in-place variant safe):
// - Chunks are disjoint, and each chunk covers the same offsets of every buffer it
//   touches: a byte of an output that aliases an input (in place) is read and
//   written by one mover only.
// - Within its chunk a mover reads an offset from every input before it stores that
//   offset anywhere (ReduceToMany; CopyToMany skips a destination equal to the source).
// - Every buffer is live until the departure barrier, which movers enter after
//   their streaming stores are fenced.

// Chunks per mover of a large collective's range. Movers claim chunks one at a time
// (CommGroup::next_chunk), so a mover the OS preempts (2 cores shared with other
// processes) holds up at most its current chunk while the others take the rest;
// fixed halves made every op wait for the slower mover's whole half.
constexpr uint64_t kChunksPerMover = 16;

// Chunk k of [0, total) in n chunks: ceil(total / n) rounded up to `align`.
std::pair<uint64_t, uint64_t> ChunkOf(uint64_t total, uint64_t k, uint64_t n, uint64_t align) {
  uint64_t per = (total + n - 1) / n;
  per = (per + align - 1) / align * align;
  const uint64_t lo = std::min<uint64_t>(total, k * per);
  return {lo, std::min<uint64_t>(total, lo + per)};
}

// Calls f(k, off, n) for the pieces of [lo, hi) cut at multiples of `seg`: piece
// [k·seg + off, k·seg + off + n).
template <typename F>
void ForEachPiece(uint64_t lo, uint64_t hi, uint64_t seg, F&& f) {
  while (lo < hi) {
    const uint64_t k = lo / seg, end = std::min(hi, (k + 1) * seg);
    f(k, lo - k * seg, end - lo);
    lo = end;
  }
}

// Steps 4-5 of every large collective: movers move [lo, hi) of the op's range of
// `total` units (chunks aligned to `align` units), then everyone meets at the
// departure barrier (peers may write into this rank's output until they arrive).
template <typename Move>
void RunMovers(Ctx& c, uint64_t total, uint64_t align, Move&& move) {
  const int M = c.g.movers();
  if (c.rank < M) {
    // 4. Move chunks for every rank until none is left.
    const uint64_t n = static_cast<uint64_t>(M) * kChunksPerMover;
    for (uint64_t k = c.g.next_chunk().fetch_add(1, std::memory_order_relaxed); k < n;
         k = c.g.next_chunk().fetch_add(1, std::memory_order_relaxed)) {
      auto [lo, hi] = ChunkOf(total, k, n, align);
      if (lo < hi) move(lo, hi);
    }
  }
  // 5. Wait until every mover is done with every rank's buffers.
  c.Barrier("departure barrier", true);
}

// Large outputs get streaming stores (see copy.h): nobody reads them back soon.
bool Streaming(uint64_t written_bytes) { return written_bytes >= kStreamingBytes; }

// All-reduce, one pass over memory. Range: the count elements. For each block of
// its part a mover reduces the P inputs in rank order (deterministic: identical in
// every output) and stores the result into every output. Traffic P·N reads + P·N
// writes, the 2·P·N minimum (reduce-scatter + all-gather moves 3·P·N).
void AllReduceLarge(Ctx& c) {
  std::vector<const uint8_t*> in(c.P);
  std::vector<uint8_t*> out(c.P);
  RunMovers(c, c.d.count, 64 / c.es, [&](uint64_t lo, uint64_t hi) {
    for (int q = 0; q < c.P; ++q) {
      in[q] = c.peer(q).send + lo * c.es;
      out[q] = c.peer(q).recv + lo * c.es;
    }
    ReduceToMany(out.data(), c.P, Streaming(c.P * c.d.count * c.es), in.data(), c.P, hi - lo, c.d.dtype, c.d.red,
                 c.P);
  });
}

// Range: the P·count elements of the concatenated outputs (rank q's recv is
// elements [q·count, (q+1)·count) of every input). Traffic P·N reads + N writes.
void ReduceScatter(Ctx& c) {
  std::vector<const uint8_t*> in(c.P);
  const bool streaming = Streaming(c.P * c.d.count * c.es);
  RunMovers(c, c.P * c.d.count, 64 / c.es, [&](uint64_t lo, uint64_t hi) {
    ForEachPiece(lo, hi, c.d.count, [&](uint64_t q, uint64_t off, uint64_t n) {
      for (int r = 0; r < c.P; ++r) in[r] = c.peer(r).send + (q * c.d.count + off) * c.es;
      uint8_t* out = c.peer(static_cast<int>(q)).recv + off * c.es;
      ReduceToMany(&out, 1, streaming, in.data(), c.P, n, c.d.dtype, c.d.red, c.P);
    });
  });
}

// Range: the bytes of one output (P chunks); each block of rank r's input is read
// once and stored into chunk r of every output. Traffic N reads + P·N writes.
void AllGather(Ctx& c) {
  const uint64_t bytes = c.d.count * c.es;
  std::vector<uint8_t*> dst(c.P);
  RunMovers(c, c.P * bytes, 64, [&](uint64_t lo, uint64_t hi) {
    ForEachPiece(lo, hi, bytes, [&](uint64_t r, uint64_t off, uint64_t n) {
      for (int q = 0; q < c.P; ++q) dst[q] = c.peer(q).recv + r * bytes + off;
      CopyToMany(dst.data(), c.P, c.peer(static_cast<int>(r)).send + off, n, Streaming(c.P * c.P * bytes));
    });
  });
}

// Range: the root's bytes, each block read once and stored into every output (the
// root's own is skipped in place).
void Broadcast(Ctx& c) {
  const uint64_t bytes = c.d.count * c.es;
  std::vector<uint8_t*> dst(c.P);
  RunMovers(c, bytes, 64, [&](uint64_t lo, uint64_t hi) {
    for (int q = 0; q < c.P; ++q) dst[q] = c.peer(q).recv + lo;
    CopyToMany(dst.data(), c.P, c.peer(c.d.root).send + lo, hi - lo, Streaming(c.P * bytes));
  });
}

// Range: the P·P chunks of the concatenated outputs (chunk r of rank q's recv is
// chunk q of rank r's send; in place, step 1 snapshotted the send side).
void AllToAll(Ctx& c) {
  const uint64_t bytes = c.d.count * c.es;
  const bool streaming = Streaming(c.P * c.P * bytes);
  RunMovers(c, c.P * c.P * bytes, 64, [&](uint64_t lo, uint64_t hi) {
    ForEachPiece(lo, hi, bytes, [&](uint64_t k, uint64_t off, uint64_t n) {
      const int q = static_cast<int>(k / c.P), r = static_cast<int>(k % c.P);
      uint8_t* dst = c.peer(q).recv + r * bytes + off;
      const uint8_t* src = c.peer(r).send + q * bytes + off;
      CopyToMany(&dst, 1, src, n, streaming);
    });
  });
}

void AllToAllV(Ctx& c) {
  CheckAllToAllVCounts(c);
  for (int q = 0; q < c.P; ++q) {
    const Desc& p = c.peer(q);
    uint64_t n = c.d.recv_counts[q];
    if (n != 0) std::memcpy(c.d.recv + c.d.recv_displs[q] * c.es, p.send + p.send_displs[c.rank] * c.es, n * c.es);
  }
  c.Barrier("departure barrier", true);
}

// MPI_Comm_split: ranks of one color, ordered by (key, parent rank).
void Split(Ctx& c, SplitResult* out) {
  out->color = c.d.color;
  if (c.d.color < 0) return;
  std::vector<std::pair<int, int>> members;  // (key, parent rank)
  for (int q = 0; q < c.P; ++q) {
    if (c.peer(q).color == c.d.color) members.push_back({c.peer(q).key, q});
  }
  std::sort(members.begin(), members.end());
  out->new_size = static_cast<int>(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == c.rank) out->new_rank = static_cast<int>(i);
    out->member_world_ranks.push_back(c.g.WorldRank(members[i].second));
  }
}

// Bytes of `d.send` an in-place all-to-all(v) reads: snapshot them before posting.
uint64_t SendExtent(const Desc& d, int P) {
  if (d.op == CollOp::kAllToAll) return static_cast<uint64_t>(P) * d.count * DTypeSize(d.dtype);
  uint64_t end = 0;
  for (int q = 0; q < P; ++q) end = std::max(end, d.send_displs[q] + d.send_counts[q]);
  return end * DTypeSize(d.dtype);
}

bool Overlap(const uint8_t* a, uint64_t an, const uint8_t* b, uint64_t bn) { return an && bn && a < b + bn && b < a + an; }

uint64_t RecvExtent(const Desc& d, int P) {
  if (d.op == CollOp::kAllToAll) return static_cast<uint64_t>(P) * d.count * DTypeSize(d.dtype);
  uint64_t end = 0;
  for (int q = 0; q < P; ++q) end = std::max(end, d.recv_displs[q] + d.recv_counts[q]);
  return end * DTypeSize(d.dtype);
}

}  // namespace

void RunCollective(CommGroup& g, int rank, Desc& d, Clock::time_point deadline, double timeout_ms,
                   SplitResult* split, const char* timeout_name) {
  Ctx c{g, rank, g.nranks(), d, DTypeSize(d.dtype), static_cast<int>(d.seq & 1),
        WaitSite{rank, d.seq, d.fingerprint, "arrival barrier", timeout_ms, timeout_name}, deadline};
  if (g.aborted()) g.ThrowAborted(rank, d.seq, d.fingerprint);

  // Step 0: collectives of one rank run in seq order.
  c.site.phase = "wait for the previous collective";
  g.WaitPrevious(c.site, deadline);

  // Step 1: prepare and post.
  std::vector<uint8_t> snapshot;  // lives until the departure barrier
  const bool small = IsSmall(d, c.P);
  // A large collective moves data for long: the completions held back for the ops before
  // it are posted now, not after it (device/stream.h, "Batched completions").
  if (!small) FlushStreamCompletions();
  if (d.op == CollOp::kAllToAll || d.op == CollOp::kAllToAllV) {
    uint64_t sn = SendExtent(d, c.P);
    if (Overlap(d.send, sn, d.recv, RecvExtent(d, c.P))) {
      snapshot.assign(d.send, d.send + sn);
      d.send = snapshot.data();
    }
  }
  g.slot(rank).desc[c.parity] = d;

  // Step 2: arrival barrier (small messages: the last arrival builds the result).
  if (small) {
    std::function<void()> build = [&c] { BuildSmallResult(c); };
    c.site.phase = "arrival barrier";
    g.Barrier(c.site, deadline, &build);
  } else {
    std::function<void()> reset = [&g] { g.next_chunk().store(0, std::memory_order_relaxed); };
    c.site.phase = "arrival barrier";
    g.Barrier(c.site, deadline, &reset);
  }

  // Step 3: fingerprints.
  CheckFingerprints(c);

  // Steps 4-5.
  if (small) {
    CopySmallResult(c);
    g.MarkDone(rank, d.seq);
    return;
  }
  switch (d.op) {
    case CollOp::kAllReduce: AllReduceLarge(c); break;
    case CollOp::kBroadcast: Broadcast(c); break;
    case CollOp::kAllGather: AllGather(c); break;
    case CollOp::kReduceScatter: ReduceScatter(c); break;
    case CollOp::kAllToAll: AllToAll(c); break;
    case CollOp::kAllToAllV: AllToAllV(c); break;
    case CollOp::kBarrier: break;
    case CollOp::kSplit: Split(c, split); break;
  }
  g.MarkDone(rank, d.seq);
}

}  // namespace comm
}  // namespace ascent
