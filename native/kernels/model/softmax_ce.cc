// Log-softmax, cross-entropy with ignore_index (per-token loss and lse saved for
// the backward), token log-probs (GRPO), and the cross-entropy backward.
#include <cmath>
#include <string>

#include "kernels/model/ignore_index.h"
#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

// logsumexp of scale * x (scale > 0).
double LseD(const float* x, int64_t V, double scale = 1.0) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < V; ++i) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < V; ++i) s += std::exp(scale * (x[i] - m));
  return scale * m + std::log(s);
}

float LseF(const VecOps& v, const float* x, int64_t V, float scale = 1.0f) {
  const float m = v.max(x, V) * scale;
  return m + std::log(v.expsum(x, scale, m, nullptr, V));
}


const char* CeName(CeMode mode) { return mode == CeMode::kLoss ? "crossEntropy" : "tokenLogprobs"; }

}  // namespace

void ref::LogSoftmax(const LogSoftmaxArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    double lse = LseD(x, a.V);
    for (int64_t i = 0; i < a.V; ++i) a.out[t * a.V + i] = static_cast<float>(x[i] - lse);
  }
}

void fast::LogSoftmax(const LogSoftmaxArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    float* o = a.out + t * a.V;
    const float lse = LseF(v, x, a.V);
    for (int64_t i = 0; i < a.V; ++i) o[i] = x[i] - lse;
  }
}

void ref::CrossEntropy(const CrossEntropyArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    double lse = LseD(x, a.V, a.scale);
    a.lse[t] = static_cast<float>(lse);
    int32_t y = a.targets[t];
    if (IgnoredTarget(y, t, a.V, a.ignore_index, CeName(a.mode))) {
      a.loss[t] = 0.0f;
    } else {
      const double zy = static_cast<double>(a.scale) * x[y];
      a.loss[t] = static_cast<float>(a.mode == CeMode::kLoss ? lse - zy : zy - lse);
    }
  }
}

void fast::CrossEntropy(const CrossEntropyArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) IgnoredTarget(a.targets[t], t, a.V, a.ignore_index, CeName(a.mode));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    const float lse = LseF(v, x, a.V, a.scale);
    const int32_t y = a.targets[t];
    a.lse[t] = lse;
    const float zy = y == a.ignore_index ? 0.0f : a.scale * x[y];
    a.loss[t] = y == a.ignore_index ? 0.0f : (a.mode == CeMode::kLoss ? lse - zy : zy - lse);
  }
}

void ref::CrossEntropyBackward(const CrossEntropyBackwardArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.logits + t * a.V;
    float* d = a.dlogits + t * a.V;
    int32_t y = a.targets[t];
    if (IgnoredTarget(y, t, a.V, a.ignore_index, "crossEntropyBackward")) {
      for (int64_t i = 0; i < a.V; ++i) d[i] = 0.0f;
      continue;
    }
    double g = a.dloss[t], lse = a.lse[t], sc = a.scale;
    for (int64_t i = 0; i < a.V; ++i) d[i] = static_cast<float>(g * sc * (std::exp(sc * x[i] - lse) - (i == y ? 1.0 : 0.0)));
  }
}

void fast::CrossEntropyBackward(const CrossEntropyBackwardArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) IgnoredTarget(a.targets[t], t, a.V, a.ignore_index, "crossEntropyBackward");
  for (int64_t t = 0; t < a.T; ++t) {
    float* d = a.dlogits + t * a.V;
    const int32_t y = a.targets[t];
    if (y == a.ignore_index) {
      for (int64_t i = 0; i < a.V; ++i) d[i] = 0.0f;
      continue;
    }
    const float g = a.dloss[t] * a.scale;
    v.expsum(a.logits + t * a.V, a.scale, a.lse[t], d, a.V);
    v.scale(d, g, a.V);
    d[y] -= g;
  }
}

}  // namespace ascent::model
