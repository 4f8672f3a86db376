// Seeded token sampling (temperature, top-k, top-p) with a counter-based RNG.
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as
// 1, 2, 3", SC'11; the generator of cuRAND and torch.cuda): key = (seed lo, seed hi),
// counter = (offset lo, offset hi, row, 0). A draw depends only on (seed, offset,
// row), never on the stream, thread or the other rows, so a step is reproducible
// anywhere; callers advance `offset` by one per sampling step.
//
// The reference and fast versions pick the same candidates in the same order and
// do the same double arithmetic, so they return identical tokens; the fast one
// only selects the top-k with a partial sort instead of sorting the vocabulary.
#include <algorithm>
#include <cmath>
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

// Candidates sorted by logit descending, ties -> lower index (a strict total order,
// so any correct sort gives the same sequence).
struct ByLogit {
  const float* x;
  bool operator()(int32_t i, int32_t j) const { return x[i] > x[j] || (x[i] == x[j] && i < j); }
};

// Shared tail: softmax of the sorted candidates, top-p cut, inverse-CDF pick.
int32_t Pick(const SampleArgs& a, const float* x, const int32_t* cand, int64_t n, int64_t row, std::vector<double>& w) {
  const double inv_t = 1.0 / static_cast<double>(a.temperature);
  const double top = x[cand[0]];
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = std::exp((x[cand[i]] - top) * inv_t);
    total += w[i];
  }
  if (a.top_p < 1.0) {
    double cum = 0;
    int64_t keep = n;
    for (int64_t i = 0; i < n; ++i) {
      cum += w[i];
      if (cum >= a.top_p * total) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    total = cum;
  }
  const double target = Uniform(a, row) * total;
  double cum = 0;
  for (int64_t i = 0; i < n; ++i) {
    cum += w[i];
    if (cum > target) return cand[i];
  }
  return cand[n - 1];
}

int32_t ArgmaxRef(const float* x, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

void ref::Sample(const SampleArgs& a) {
  std::vector<int32_t> idx(static_cast<size_t>(a.V));
  std::vector<double> w(static_cast<size_t>(a.V));
  for (int64_t b = 0; b < a.B; ++b) {
    const float* x = a.logits + b * a.V;
    if (a.temperature == 0.0f) {
      a.out[b] = ArgmaxRef(x, a.V);
      continue;
    }
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t i, int32_t j) { return x[i] > x[j]; });
    const int64_t n = a.top_k > 0 ? std::min(a.top_k, a.V) : a.V;
    a.out[b] = Pick(a, x, idx.data(), n, b, w);
  }
}

void fast::Sample(const SampleArgs& a) {
  const VecOps& v = Vec();
  std::vector<int32_t> idx(static_cast<size_t>(a.V));
  std::vector<double> w(static_cast<size_t>(a.V));
  for (int64_t b = 0; b < a.B; ++b) {
    const float* x = a.logits + b * a.V;
    if (a.temperature == 0.0f) {
      const float m = v.max(x, a.V);
      int64_t i = 0;
      while (i + 1 < a.V && !(x[i] == m)) ++i;
      a.out[b] = static_cast<int32_t>(i);
      continue;
    }
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t n = a.top_k > 0 ? std::min(a.top_k, a.V) : a.V;
    if (n < a.V) {
      std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), ByLogit{x});
    } else {
      std::sort(idx.begin(), idx.end(), ByLogit{x});
    }
    a.out[b] = Pick(a, x, idx.data(), n, b, w);
  }
}

}  // namespace ascent::model
