// Causal depthwise conv1d with its conv state (gdn.h), SiLU optional: the
// short convolution Qwen3-Next applies to the q/k/v projection. x is channels-last
// [B, T, C]; the reference sums in double per output, the fast kernel walks whole
// rows of C channels per tap (contiguous, vectorisable).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/model/gdn.h"

namespace ascent::model {
namespace {

// Input at time s (may be negative: the state) of batch b, channel c.
template <typename A>
inline float In(const A& a, int64_t b, int64_t s, int64_t c) {
  if (s >= 0) return a.x[(b * a.T + s) * a.C + c];
  if (a.s0 == nullptr) return 0.0f;
  return a.s0[(b * a.C + c) * (a.K - 1) + (a.K - 1) + s];
}

void StoreState(const CausalConvArgs& a) {
  if (a.st == nullptr) return;
  const int64_t K1 = a.K - 1;
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t c = 0; c < a.C; ++c) {
      for (int64_t j = 0; j < K1; ++j) a.st[(b * a.C + c) * K1 + j] = In(a, b, a.T - K1 + j, c);
    }
  }
}

inline double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

void ref::CausalConv(const CausalConvArgs& a) {
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t t = 0; t < a.T; ++t) {
      for (int64_t c = 0; c < a.C; ++c) {
        double pre = 0;
        for (int64_t j = 0; j < a.K; ++j) pre += static_cast<double>(a.w[c * a.K + j]) * In(a, b, t - (a.K - 1) + j, c);
        a.y[(b * a.T + t) * a.C + c] = static_cast<float>(a.silu ? pre * Sig(pre) : pre);
      }
    }
  }
  StoreState(a);
}

void fast::CausalConv(const CausalConvArgs& a) {
  const int64_t C = a.C, K = a.K;
  std::vector<float> wt(K * C), pre(C), zero(C, 0.0f), srow(C);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < K; ++j) wt[j * C + c] = a.w[c * K + j];
  }
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t t = 0; t < a.T; ++t) {
      std::fill(pre.begin(), pre.end(), 0.0f);
      for (int64_t j = 0; j < K; ++j) {
        const int64_t s = t - (K - 1) + j;
        const float* xr;
        if (s >= 0) {
          xr = a.x + (b * a.T + s) * C;
        } else if (a.s0 == nullptr) {
          xr = zero.data();
        } else {
          for (int64_t c = 0; c < C; ++c) srow[c] = a.s0[(b * C + c) * (K - 1) + (K - 1) + s];
          xr = srow.data();
        }
        const float* wr = &wt[j * C];
        for (int64_t c = 0; c < C; ++c) pre[c] += wr[c] * xr[c];
      }
      float* y = a.y + (b * a.T + t) * C;
      if (a.silu) {
        for (int64_t c = 0; c < C; ++c) y[c] = pre[c] / (1.0f + std::exp(-pre[c]));
      } else {
        std::memcpy(y, pre.data(), sizeof(float) * C);
      }
    }
  }
  StoreState(a);
}

namespace {

// Shared backward (the reference in double, the fast one in float through Acc).
template <typename Acc>
void ConvBackward(const CausalConvBackwardArgs& a) {
  const int64_t C = a.C, K = a.K, K1 = K - 1;
  std::vector<Acc> dw(C * K, 0), ds(a.B * C * (K1 > 0 ? K1 : 1), 0), dpre(C);
  std::fill(a.dx, a.dx + a.B * a.T * C, 0.0f);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t t = 0; t < a.T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        Acc pre = 0;
        for (int64_t j = 0; j < K; ++j) pre += static_cast<Acc>(a.w[c * K + j]) * In(a, b, t - K1 + j, c);
        Acc dy = a.dy[(b * a.T + t) * C + c];
        if (a.silu) {
          Acc s = static_cast<Acc>(1) / (static_cast<Acc>(1) + std::exp(-pre));
          dy *= s * (static_cast<Acc>(1) + pre * (static_cast<Acc>(1) - s));
        }
        dpre[c] = dy;
      }
      for (int64_t j = 0; j < K; ++j) {
        const int64_t s = t - K1 + j;
        for (int64_t c = 0; c < C; ++c) {
          dw[c * K + j] += dpre[c] * In(a, b, s, c);
          const Acc g = dpre[c] * a.w[c * K + j];
          if (s >= 0) {
            a.dx[(b * a.T + s) * C + c] += static_cast<float>(g);
          } else {
            ds[(b * C + c) * K1 + K1 + s] += g;
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < C * K; ++i) a.dw[i] = static_cast<float>(dw[i]);
  if (a.ds0 != nullptr) {
    for (int64_t i = 0; i < a.B * C * K1; ++i) a.ds0[i] = static_cast<float>(ds[i]);
  }
}

}  // namespace

void ref::CausalConvBackward(const CausalConvBackwardArgs& a) { ConvBackward<double>(a); }
void fast::CausalConvBackward(const CausalConvBackwardArgs& a) { ConvBackward<float>(a); }

}  // namespace ascent::model
