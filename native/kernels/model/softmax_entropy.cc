// Token log-probs and the exact entropy of the softmax over the vocabulary in one pass
// (GRPO's entropy bonus): with z = scale * logits and p = softmax(z),
//   out[t]     = z[t, target] - lse_t              (as tokenLogprobs)
//   out[T + t] = H_t = -sum_v p_v log p_v = lse_t - sum_v p_v z_v
// and the backward of both:
//   dlogits[t, j] = scale * (dlogp_t (onehot_j - p_j) - dH_t p_j (log p_j + H_t)).
// Rows whose target is the ignore index give 0 (both halves, and their gradient).
#include <cmath>
#include <string>
#include <vector>

#include "kernels/model/ignore_index.h"
#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {


// lse and entropy of one row in fp64 (the reference both directions use).
void RowD(const float* x, int64_t V, double sc, double* lse, double* h) {
  double m = -INFINITY, s = 0, pz = 0;
  for (int64_t i = 0; i < V; ++i) m = sc * x[i] > m ? sc * x[i] : m;
  for (int64_t i = 0; i < V; ++i) s += std::exp(sc * x[i] - m);
  *lse = m + std::log(s);
  for (int64_t i = 0; i < V; ++i) pz += std::exp(sc * x[i] - *lse) * (*lse - sc * x[i]);
  *h = pz;
}

constexpr const char* kFwd = "tokenLogprobsEntropy";
constexpr const char* kBwd = "tokenLogprobsEntropyBackward";

}  // namespace

void ref::TokenLogprobsEntropy(const LogprobEntropyArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    double lse, h;
    RowD(x, a.V, a.scale, &lse, &h);
    a.lse[t] = static_cast<float>(lse);
    const int32_t y = a.targets[t];
    const bool skip = IgnoredTarget(y, t, a.V, a.ignore_index, kFwd);
    a.out[t] = skip ? 0.0f : static_cast<float>(static_cast<double>(a.scale) * x[y] - lse);
    a.out[a.T + t] = skip ? 0.0f : static_cast<float>(h);
  }
}

void fast::TokenLogprobsEntropy(const LogprobEntropyArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) IgnoredTarget(a.targets[t], t, a.V, a.ignore_index, kFwd);
  std::vector<float> p(static_cast<size_t>(a.V));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    const int32_t y = a.targets[t];
    // One exp pass: e = exp(z − max) kept for the entropy; its sum is the one tokenLogprobs' fast kernel
    // takes (the same expsum), so the log-probs agree with it bit for bit.
    const float m = v.max(x, a.V) * a.scale;
    const float s = v.expsum(x, a.scale, m, y == a.ignore_index ? nullptr : p.data(), a.V);
    const float lse = m + std::log(s);
    a.lse[t] = lse;
    if (y == a.ignore_index) {
      a.out[t] = 0.0f;
      a.out[a.T + t] = 0.0f;
      continue;
    }
    a.out[t] = a.scale * x[y] - lse;
    // H = lse − Σ p z with p = e / s: its rounding error is of the order of lse's own (the log-prob's too).
    const float h = lse - a.scale * v.dot(p.data(), x, a.V) / s;
    a.out[a.T + t] = h > 0.0f ? h : 0.0f;
  }
}

void ref::TokenLogprobsEntropyBackward(const LogprobEntropyBackwardArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    float* d = a.dlogits + t * a.V;
    const int32_t y = a.targets[t];
    if (IgnoredTarget(y, t, a.V, a.ignore_index, kBwd)) {
      for (int64_t i = 0; i < a.V; ++i) d[i] = 0.0f;
      continue;
    }
    const double sc = a.scale, gl = a.dout[t], gh = a.dout[a.T + t];
    double lse, h;
    RowD(x, a.V, sc, &lse, &h);
    for (int64_t i = 0; i < a.V; ++i) {
      const double lp = sc * x[i] - lse, p = std::exp(lp);
      d[i] = static_cast<float>(sc * (gl * ((i == y ? 1.0 : 0.0) - p) - gh * p * (lp + h)));
    }
  }
}

void fast::TokenLogprobsEntropyBackward(const LogprobEntropyBackwardArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) IgnoredTarget(a.targets[t], t, a.V, a.ignore_index, kBwd);
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    float* d = a.dlogits + t * a.V;
    const int32_t y = a.targets[t];
    if (y == a.ignore_index) {
      for (int64_t i = 0; i < a.V; ++i) d[i] = 0.0f;
      continue;
    }
    const float sc = a.scale, gl = a.dout[t] * sc, gh = a.dout[a.T + t] * sc, lse = a.lse[t], h = a.entropy[t];
    v.expsum(x, sc, lse, d, a.V);  // d = p
    for (int64_t i = 0; i < a.V; ++i) d[i] = -d[i] * (gl + gh * (sc * x[i] - lse + h));
    d[y] += gl;
  }
}

}  // namespace ascent::model
