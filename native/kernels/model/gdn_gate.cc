// The gated RMSNorm of the GDN output (y = RMSNorm(x) * w * silu(z)) and the GDN
// gating (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)), forward and
// backward (gdn.h). Reference in double, fast in fp32 with vec.h dot products.
#include <cmath>
#include <vector>

#include "kernels/model/gdn.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

template <typename R>
inline R Sigmoid(R x) { return static_cast<R>(1) / (static_cast<R>(1) + std::exp(-x)); }
template <typename R>
inline R Softplus(R x) { return x > static_cast<R>(20) ? x : std::log1p(std::exp(x)); }

template <typename R>
void NormForward(const GatedRmsNormArgs& a) {
  for (int64_t n = 0; n < a.N; ++n) {
    const float* x = a.x + n * a.H;
    const float* z = a.z + n * a.H;
    R ss = 0;
    for (int64_t i = 0; i < a.H; ++i) ss += static_cast<R>(x[i]) * x[i];
    const R r = static_cast<R>(1) / std::sqrt(ss / static_cast<R>(a.H) + static_cast<R>(a.eps));
    a.rstd[n] = static_cast<float>(r);
    for (int64_t i = 0; i < a.H; ++i) {
      const R zi = z[i];
      a.y[n * a.H + i] = static_cast<float>(x[i] * r * a.w[i] * zi * Sigmoid(zi));
    }
  }
}

// n = x rstd, s = silu(z): y = n w s; dz = dy n w silu'(z); dw = sum dy n s;
// dn = dy w s; dx = rstd (dn - n mean(dn n)).
template <typename R>
void NormBackward(const GatedRmsNormBackwardArgs& a) {
  std::vector<R> dw(a.H, 0), dn(a.H);
  for (int64_t n = 0; n < a.N; ++n) {
    const float* x = a.x + n * a.H;
    const float* z = a.z + n * a.H;
    const float* dy = a.dy + n * a.H;
    const R r = a.rstd[n];
    R c = 0;
    for (int64_t i = 0; i < a.H; ++i) {
      const R zi = z[i], sg = Sigmoid(zi), s = zi * sg, nx = x[i] * r;
      dn[i] = static_cast<R>(dy[i]) * a.w[i] * s;
      c += dn[i] * nx;
      dw[i] += static_cast<R>(dy[i]) * nx * s;
      a.dz[n * a.H + i] = static_cast<float>(dy[i] * nx * a.w[i] * sg * (static_cast<R>(1) + zi * (static_cast<R>(1) - sg)));
    }
    c /= static_cast<R>(a.H);
    for (int64_t i = 0; i < a.H; ++i) a.dx[n * a.H + i] = static_cast<float>(r * (dn[i] - x[i] * r * c));
  }
  for (int64_t i = 0; i < a.H; ++i) a.dw[i] = static_cast<float>(dw[i]);
}

template <typename R>
void GatingForward(const GdnGatingArgs& a) {
  for (int64_t n = 0; n < a.N; ++n) {
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t i = n * a.H + h;
      const R x = static_cast<R>(a.a[i]) + a.dt_bias[h];
      a.g[i] = static_cast<float>(-std::exp(static_cast<R>(a.a_log[h])) * Softplus(x));
      a.beta[i] = static_cast<float>(Sigmoid(static_cast<R>(a.b[i])));
    }
  }
}

// da = dg * (-exp(A_log)) * sigmoid(a + dt_bias); ddt_bias = sum da; dA_log = sum dg * g; db = dbeta s (1 - s).
template <typename R>
void GatingBackward(const GdnGatingBackwardArgs& a) {
  std::vector<R> dA(a.H, 0), ddt(a.H, 0);
  for (int64_t n = 0; n < a.N; ++n) {
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t i = n * a.H + h;
      const R x = static_cast<R>(a.a[i]) + a.dt_bias[h];
      const R e = std::exp(static_cast<R>(a.a_log[h]));
      const R dg = a.dg[i];
      const R da = dg * -e * Sigmoid(x);
      a.da[i] = static_cast<float>(da);
      ddt[h] += da;
      dA[h] += dg * -e * Softplus(x);
      const R s = Sigmoid(static_cast<R>(a.b[i]));
      a.db[i] = static_cast<float>(a.dbeta[i] * s * (static_cast<R>(1) - s));
    }
  }
  for (int64_t h = 0; h < a.H; ++h) {
    a.da_log[h] = static_cast<float>(dA[h]);
    a.ddt_bias[h] = static_cast<float>(ddt[h]);
  }
}

}  // namespace

void ref::GatedRmsNorm(const GatedRmsNormArgs& a) { NormForward<double>(a); }
void fast::GatedRmsNorm(const GatedRmsNormArgs& a) { NormForward<float>(a); }
void ref::GatedRmsNormBackward(const GatedRmsNormBackwardArgs& a) { NormBackward<double>(a); }
void fast::GatedRmsNormBackward(const GatedRmsNormBackwardArgs& a) { NormBackward<float>(a); }
void ref::GdnGating(const GdnGatingArgs& a) { GatingForward<double>(a); }
void fast::GdnGating(const GdnGatingArgs& a) { GatingForward<float>(a); }
void ref::GdnGatingBackward(const GdnGatingBackwardArgs& a) { GatingBackward<double>(a); }
void fast::GdnGatingBackward(const GdnGatingBackwardArgs& a) { GatingBackward<float>(a); }

}  // namespace ascent::model
