// SwiGLU: h = silu(g) * u = g * sigmoid(g) * u, and its backward
//   du = dh * silu(g),  dg = dh * u * s * (1 + g * (1 - s)),  s = sigmoid(g).
// Strided rows let g and u be the two halves of a fused gate_up row.
#include <cmath>
#include <vector>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {

void ref::Swiglu(const SwigluArgs& a) {
  for (int64_t n = 0; n < a.N; ++n) {
    for (int64_t i = 0; i < a.I; ++i) {
      double g = a.g[n * a.g_stride + i], u = a.u[n * a.u_stride + i];
      a.h[n * a.I + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

void fast::Swiglu(const SwigluArgs& a) {
  const VecOps& v = Vec();
  std::vector<float> e(static_cast<size_t>(a.I));
  for (int64_t n = 0; n < a.N; ++n) {
    const float* __restrict g = a.g + n * a.g_stride;
    const float* __restrict u = a.u + n * a.u_stride;
    float* __restrict h = a.h + n * a.I;
    float* __restrict ep = e.data();
    v.expsum(g, -1.0f, 0.0f, ep, a.I);  // exp(-g)
    for (int64_t i = 0; i < a.I; ++i) h[i] = g[i] * u[i] / (1.0f + ep[i]);
  }
}

void ref::SwigluBackward(const SwigluBackwardArgs& a) {
  for (int64_t n = 0; n < a.N; ++n) {
    for (int64_t i = 0; i < a.I; ++i) {
      double g = a.g[n * a.g_stride + i], u = a.u[n * a.u_stride + i], dh = a.dh[n * a.I + i];
      double s = 1.0 / (1.0 + std::exp(-g));
      a.du[n * a.u_stride + i] = static_cast<float>(dh * g * s);
      a.dg[n * a.g_stride + i] = static_cast<float>(dh * u * s * (1.0 + g * (1.0 - s)));
    }
  }
}

void fast::SwigluBackward(const SwigluBackwardArgs& a) {
  const VecOps& v = Vec();
  std::vector<float> e(static_cast<size_t>(a.I));
  for (int64_t n = 0; n < a.N; ++n) {
    const float* __restrict g = a.g + n * a.g_stride;
    const float* __restrict u = a.u + n * a.u_stride;
    const float* __restrict dh = a.dh + n * a.I;
    float* __restrict dg = a.dg + n * a.g_stride;
    float* __restrict du = a.du + n * a.u_stride;
    float* __restrict ep = e.data();
    v.expsum(g, -1.0f, 0.0f, ep, a.I);
    for (int64_t i = 0; i < a.I; ++i) {
      float s = 1.0f / (1.0f + ep[i]);
      float gi = g[i], ui = u[i], d = dh[i];
      du[i] = d * gi * s;
      dg[i] = d * ui * s * (1.0f + gi * (1.0f - s));
    }
  }
}

}  // namespace ascent::model
