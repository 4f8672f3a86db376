// RMSNorm (Qwen3: y = x * rsqrt(mean(x^2) + eps) * w, stats in fp32) and backward.
#include <cmath>
#include <vector>

#include "kernels/model/model_kernels.h"
#include "kernels/model/norm_rows.h"
#include "kernels/model/vec.h"

namespace ascent::model {

void ref::RmsNorm(const RmsNormArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) a.rstd[t] = rows::RmsNormRef(a.x + t * a.H, a.w, a.y + t * a.H, a.H, a.eps);
}

void fast::RmsNorm(const RmsNormArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) a.rstd[t] = rows::RmsNormFast(v, a.x + t * a.H, a.w, a.y + t * a.H, a.H, a.eps);
}

void ref::RmsNormBackward(const RmsNormBackwardArgs& a) {
  std::vector<double> dw(static_cast<size_t>(a.H), 0.0);
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.x + t * a.H;
    const float* dy = a.dy + t * a.H;
    double r = a.rstd[t];
    double c = 0;
    for (int64_t i = 0; i < a.H; ++i) c += static_cast<double>(dy[i]) * a.w[i] * x[i];
    c /= static_cast<double>(a.H);
    for (int64_t i = 0; i < a.H; ++i) {
      a.dx[t * a.H + i] = static_cast<float>(r * (static_cast<double>(a.w[i]) * dy[i] - x[i] * r * r * c));
      dw[i] += static_cast<double>(dy[i]) * x[i] * r;
    }
  }
  for (int64_t i = 0; i < a.H; ++i) a.dw[i] = static_cast<float>(dw[i]);
}

void fast::RmsNormBackward(const RmsNormBackwardArgs& a) {
  const VecOps& v = Vec();
  std::vector<float> wdy(static_cast<size_t>(a.H)), xr(static_cast<size_t>(a.H));
  for (int64_t i = 0; i < a.H; ++i) a.dw[i] = 0.0f;
  for (int64_t t = 0; t < a.T; ++t) {
    const float* x = a.x + t * a.H;
    const float* dy = a.dy + t * a.H;
    float* dx = a.dx + t * a.H;
    const float r = a.rstd[t];
    for (int64_t i = 0; i < a.H; ++i) wdy[i] = a.w[i] * dy[i];
    const float c = v.dot(wdy.data(), x, a.H) / static_cast<float>(a.H);
    const float rrc = r * r * c;
    for (int64_t i = 0; i < a.H; ++i) dx[i] = r * (wdy[i] - x[i] * rrc);
    for (int64_t i = 0; i < a.H; ++i) xr[i] = x[i] * r;
    for (int64_t i = 0; i < a.H; ++i) a.dw[i] += dy[i] * xr[i];
  }
}

}  // namespace ascent::model
