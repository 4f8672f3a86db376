// MoE router: softmax over experts, top-k (ties -> lower expert index), optional
// renormalisation of the k weights (Qwen3-MoE norm_topk_prob), and the backward
// through both (gradients reach the logits only through the selected probs).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

void CheckIndices(const int32_t* idx, int64_t t, int64_t k, int64_t E) {
  for (int64_t j = 0; j < k; ++j) {
    if (idx[j] < 0 || idx[j] >= E) {
      KernelError("routerBackward: indices[" + std::to_string(t) + ", " + std::to_string(j) + "] = " +
                      std::to_string(idx[j]) + " is not an expert in [0, " + std::to_string(E) + ").",
                  {Num("token", static_cast<double>(t)), Num("slot", static_cast<double>(j)), Num("expert", idx[j])});
    }
  }
}

}  // namespace

void ref::Router(const RouterArgs& a) {
  std::vector<int32_t> idx(static_cast<size_t>(a.E));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* z = a.logits + t * a.E;
    float* p = a.probs + t * a.E;
    double m = -INFINITY, s = 0;
    for (int64_t e = 0; e < a.E; ++e) m = std::max(m, static_cast<double>(z[e]));
    for (int64_t e = 0; e < a.E; ++e) s += std::exp(z[e] - m);
    for (int64_t e = 0; e < a.E; ++e) p[e] = static_cast<float>(std::exp(z[e] - m) / s);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t x, int32_t y) { return p[x] > p[y]; });
    double sel = 0;
    for (int64_t j = 0; j < a.k; ++j) sel += p[idx[j]];
    for (int64_t j = 0; j < a.k; ++j) {
      a.indices[t * a.k + j] = idx[j];
      a.weights[t * a.k + j] = a.renorm ? static_cast<float>(p[idx[j]] / sel) : p[idx[j]];
    }
  }
}

void fast::Router(const RouterArgs& a) {
  const VecOps& v = Vec();
  std::vector<int32_t> top(static_cast<size_t>(a.k));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* z = a.logits + t * a.E;
    float* p = a.probs + t * a.E;
    const float m = v.max(z, a.E);
    const float s = v.expsum(z, 1.0f, m, p, a.E);
    v.scale(p, 1.0f / s, a.E);
    // One pass keeping a sorted list of the k best; an equal prob never displaces an
    // earlier (lower) index.
    int64_t n = 0;
    for (int64_t e = 0; e < a.E; ++e) {
      if (n == a.k && !(p[e] > p[top[n - 1]])) continue;
      int64_t pos = n < a.k ? n++ : n - 1;
      while (pos > 0 && p[e] > p[top[pos - 1]]) {
        top[pos] = top[pos - 1];
        --pos;
      }
      top[pos] = static_cast<int32_t>(e);
    }
    float sel = 0;
    for (int64_t j = 0; j < a.k; ++j) sel += p[top[j]];
    const float inv = a.renorm ? 1.0f / sel : 1.0f;
    for (int64_t j = 0; j < a.k; ++j) {
      a.indices[t * a.k + j] = top[j];
      a.weights[t * a.k + j] = p[top[j]] * inv;
    }
  }
}

// dp[i] = dw_i (no renorm) or (dw_i - sum_j dw_j w_j) / S with S = sum of selected
// probs; dlogits = p * (dp - sum_e p_e dp_e).
void ref::RouterBackward(const RouterBackwardArgs& a) {
  std::vector<double> dp(static_cast<size_t>(a.E));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* p = a.probs + t * a.E;
    const int32_t* idx = a.indices + t * a.k;
    const float* dw = a.dweights + t * a.k;
    CheckIndices(idx, t, a.k, a.E);
    std::fill(dp.begin(), dp.end(), 0.0);
    double S = 0, dot = 0;
    for (int64_t j = 0; j < a.k; ++j) S += p[idx[j]];
    for (int64_t j = 0; j < a.k; ++j) dot += static_cast<double>(dw[j]) * (p[idx[j]] / S);
    for (int64_t j = 0; j < a.k; ++j) dp[idx[j]] += a.renorm ? (dw[j] - dot) / S : dw[j];
    double c = 0;
    for (int64_t e = 0; e < a.E; ++e) c += p[e] * dp[e];
    for (int64_t e = 0; e < a.E; ++e) a.dlogits[t * a.E + e] = static_cast<float>(p[e] * (dp[e] - c));
  }
}

void fast::RouterBackward(const RouterBackwardArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* p = a.probs + t * a.E;
    const int32_t* idx = a.indices + t * a.k;
    const float* dw = a.dweights + t * a.k;
    CheckIndices(idx, t, a.k, a.E);
    float* dz = a.dlogits + t * a.E;
    float S = 0, dot = 0;
    for (int64_t j = 0; j < a.k; ++j) S += p[idx[j]];
    for (int64_t j = 0; j < a.k; ++j) dot += dw[j] * p[idx[j]];
    dot /= S;
    // Only the k selected experts have dp != 0: c = sum_j p_j dp_j over them.
    float c = 0;
    for (int64_t j = 0; j < a.k; ++j) c += p[idx[j]] * (a.renorm ? (dw[j] - dot) / S : dw[j]);
    for (int64_t e = 0; e < a.E; ++e) dz[e] = -p[e] * c;
    for (int64_t j = 0; j < a.k; ++j) dz[idx[j]] += p[idx[j]] * (a.renorm ? (dw[j] - dot) / S : dw[j]);
  }
}

}  // namespace ascent::model
