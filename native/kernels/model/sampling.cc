// Seeded token sampling (temperature, top-k, top-p) with a counter-based RNG.
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as
// 1, 2, 3", SC'11; the generator of cuRAND and torch.cuda): key = (seed lo, seed hi),
// counter = (offset lo, offset hi, row, 0). A draw depends only on (seed, offset,
// row), never on the stream, thread or the other rows, so a step is reproducible
// anywhere; callers advance `offset` by one per sampling step.
//
// The reference and fast versions keep the same candidates and do the same double
// arithmetic in the same order, so they return identical tokens; the fast one sorts
// only what it must (the walk and the normaliser run in token-id order, so plain
// temperature sampling needs no sort at all).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {

void Philox4x32(uint32_t key_in[2], uint32_t ctr_in[4], uint32_t out[4]) {
  uint32_t k0 = key_in[0], k1 = key_in[1];
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

namespace {

double Uniform(const SampleArgs& a, int64_t row) {
  uint32_t key[2] = {static_cast<uint32_t>(a.seed), static_cast<uint32_t>(a.seed >> 32)};
  uint32_t ctr[4] = {static_cast<uint32_t>(a.offset), static_cast<uint32_t>(a.offset >> 32), static_cast<uint32_t>(row), 0};
  uint32_t out[4];
  Philox4x32(key, ctr, out);
  return static_cast<double>(out[0] >> 8) * (1.0 / 16777216.0);
}

// Candidate order: logit descending, ties -> lower id (what the reference's stable
// sort gives). As uint64 keys: the logit (float bits mapped to an order-preserving
// uint32, -0 as +0, inverted) in the high word, the id in the low word, so sorting
// is branch-light and needs no indirect loads.
inline uint64_t DescKey(const float* x, int32_t i) {
  uint32_t u;
  std::memcpy(&u, &x[i], 4);
  if (x[i] == 0.0f) u = 0;
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending float -> ascending uint32
  return (static_cast<uint64_t>(~u) << 32) | static_cast<uint32_t>(i);
}

inline double Weight(const float* x, int32_t i, double top, double inv_t) { return std::exp((x[i] - top) * inv_t); }

// Sum of the weights of `ids` taken in ascending token id (ids is sorted in place).
double MassById(const float* x, int32_t* ids, int64_t n, double top, double inv_t) {
  std::sort(ids, ids + n);
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += Weight(x, ids[i], top, inv_t);
  return m;
}

// Inverse CDF over ids (ascending), whose weights sum to `mass`.
int32_t Walk(const SampleArgs& a, const float* x, const int32_t* ids, int64_t n, double mass, double top, double inv_t, int64_t row) {
  const double target = Uniform(a, row) * mass;
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += Weight(x, ids[i], top, inv_t);
    if (cum > target) return ids[i];
  }
  return ids[n - 1];
}

// First prefix length of the sorted candidates whose mass reaches top_p * total, or
// 0 when `n` sorted candidates do not reach it.
int64_t NucleusCut(const float* x, const int32_t* sorted, int64_t n, double limit, double top, double inv_t) {
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += Weight(x, sorted[i], top, inv_t);
    if (cum >= limit) return i + 1;
  }
  return 0;
}

int32_t ArgmaxRef(const float* x, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

// The definition, step by step (the fast version computes exactly these numbers):
// 1. sort the vocabulary by logit descending (ties -> lower id); keep the first
//    top_k (all when top_k is 0). Weights w_i = exp((x_i - x_max) / temperature) in
//    double; total = sum of the kept weights in ascending token id.
// 2. top_p < 1: keep the shortest sorted prefix whose running sum (in sorted order)
//    reaches top_p * total (all kept ones when rounding never reaches it).
// 3. mass = sum of the kept weights in ascending token id; u = Philox draw; the token
//    is the first kept id (ascending) whose running sum exceeds u * mass.
void ref::Sample(const SampleArgs& a) {
  std::vector<int32_t> idx(static_cast<size_t>(a.V)), kept;
  for (int64_t b = 0; b < a.B; ++b) {
    const float* x = a.logits + b * a.V;
    if (a.temperature == 0.0f) {
      a.out[b] = ArgmaxRef(x, a.V);
      continue;
    }
    const double inv_t = 1.0 / static_cast<double>(a.temperature);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t i, int32_t j) { return x[i] > x[j]; });
    const double top = x[idx[0]];
    int64_t n = a.top_k > 0 ? std::min(a.top_k, a.V) : a.V;
    kept.assign(idx.begin(), idx.begin() + n);
    if (a.top_p < 1.0) {
      const double total = MassById(x, kept.data(), n, top, inv_t);
      const int64_t cut = NucleusCut(x, idx.data(), n, a.top_p * total, top, inv_t);
      if (cut > 0) n = cut;
      kept.assign(idx.begin(), idx.begin() + n);
    }
    const double mass = MassById(x, kept.data(), n, top, inv_t);
    a.out[b] = Walk(a, x, kept.data(), n, mass, top, inv_t, b);
  }
}

void fast::Sample(const SampleArgs& a) {
  // Same numbers as the definition, computed once: every weight up front (the same
  // double exp), kept sets as flags so index-order sums and the walk need no sort,
  // selection + a sort of k for top-k, and for the nucleus a selection of the best
  // 256, 1024, ... until their mass reaches top_p, then a sort of that prefix only.
  const VecOps& v = Vec();
  std::vector<int32_t> idx(static_cast<size_t>(a.V));
  std::vector<uint64_t> key(static_cast<size_t>(a.V));
  std::vector<double> w(static_cast<size_t>(a.V));
  std::vector<uint8_t> flag(static_cast<size_t>(a.V));
  for (int64_t b = 0; b < a.B; ++b) {
    const float* x = a.logits + b * a.V;
    const float mx = v.max(x, a.V);
    if (a.temperature == 0.0f) {
      int64_t i = 0;
      while (i + 1 < a.V && !(x[i] == mx)) ++i;
      a.out[b] = static_cast<int32_t>(i);
      continue;
    }
    const double inv_t = 1.0 / static_cast<double>(a.temperature), top = mx;
    for (int64_t i = 0; i < a.V; ++i) w[i] = Weight(x, static_cast<int32_t>(i), top, inv_t);
    const bool cut_k = a.top_k > 0 && a.top_k < a.V;
    int64_t n = cut_k ? a.top_k : a.V;
    // Sorted prefixes live in key[]; idx[i] = low word of key[i] once sorted.
    auto sort_prefix = [&](int64_t m) {
      std::sort(key.begin(), key.begin() + m);
      for (int64_t i = 0; i < m; ++i) idx[i] = static_cast<int32_t>(key[i] & 0xffffffffu);
    };
    if (cut_k || a.top_p < 1.0) {
      for (int64_t i = 0; i < a.V; ++i) key[i] = DescKey(x, static_cast<int32_t>(i));
    }
    if (cut_k) {
      // Only the k best are candidates: select them (O(V)), then order them.
      std::nth_element(key.begin(), key.begin() + (n - 1), key.end());
      sort_prefix(n);
    }
    auto flagged_sum = [&](int64_t count) {  // flags = idx[0..count); sum in id order
      std::fill(flag.begin(), flag.end(), 0);
      for (int64_t i = 0; i < count; ++i) flag[idx[i]] = 1;
      double m = 0;
      for (int64_t i = 0; i < a.V; ++i) {
        if (flag[i]) m += w[i];
      }
      return m;
    };
    if (a.top_p < 1.0) {
      double total = 0;
      if (cut_k) {
        total = flagged_sum(n);
      } else {
        for (int64_t i = 0; i < a.V; ++i) total += w[i];
      }
      const double limit = a.top_p * total;
      auto cut_within = [&](int64_t m) {
        double cum = 0;
        for (int64_t i = 0; i < m; ++i) {
          cum += w[idx[i]];
          if (cum >= limit) return i + 1;
        }
        return int64_t{0};
      };
      int64_t cut = 0;
      if (cut_k) {
        cut = cut_within(n);
      } else {
        // Grow a selected (unordered) best-m set until its mass clearly reaches the
        // limit, then order only that prefix and find the exact cut as the
        // definition does; a rounding doubt falls back to ordering everything.
        int64_t m = std::min<int64_t>(n, 256);
        for (;;) {
          if (m < n) std::nth_element(key.begin(), key.begin() + (m - 1), key.begin() + n);
          double approx = 0;
          for (int64_t i = 0; i < m; ++i) approx += w[key[i] & 0xffffffffu];
          if (m == n || approx >= limit * (1 + 1e-9)) break;
          m = std::min(n, m * 4);
        }
        sort_prefix(m);
        cut = cut_within(m);
        if (cut == 0 && m < n) {
          sort_prefix(n);
          cut = cut_within(n);
        }
      }
      if (cut > 0) n = cut;
    }
    double mass = 0;
    if (n == a.V) {
      std::fill(flag.begin(), flag.end(), 1);
      for (int64_t i = 0; i < a.V; ++i) mass += w[i];
    } else {
      mass = flagged_sum(n);
    }
    const double target = Uniform(a, b) * mass;
    double cum = 0;
    int32_t pick = -1, last = 0;
    for (int64_t i = 0; i < a.V && pick < 0; ++i) {
      if (!flag[i]) continue;
      last = static_cast<int32_t>(i);
      cum += w[i];
      if (cum > target) pick = last;
    }
    a.out[b] = pick >= 0 ? pick : last;
  }
}

}  // namespace ascent::model
