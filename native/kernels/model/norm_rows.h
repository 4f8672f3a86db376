// The per-row arithmetic of RMSNorm (rmsnorm.cc) and RoPE (rope.cc), shared with the fused
// rollout kernels (fused_norm.cc) so that a fused kernel gives the same bits as the separate
// ones by construction: one definition of each row, in one operation order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/model/vec.h"

namespace ascent::model::rows {

// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps) summed in double; returns r. y may be x.
inline float RmsNormRef(const float* x, const float* w, float* y, int64_t H, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(x[i]) * x[i];
  float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(H) + eps));
  for (int64_t i = 0; i < H; ++i) y[i] = x[i] * r * w[i];
  return r;
}

// The fast row: the sum of squares by the fp32 dot of vec.h. y may be x.
inline float RmsNormFast(const VecOps& v, const float* x, const float* w, float* y, int64_t H, float eps) {
  float ss = v.dot(x, x, H);
  float r = 1.0f / std::sqrt(ss / static_cast<float>(H) + eps);
  for (int64_t i = 0; i < H; ++i) y[i] = x[i] * r * w[i];
  return r;
}

// cos and sin of pos * inv_freq (in double) times scale, each rounded to fp32.
inline void RopeAngle(double pos, double inv_freq, double scale, bool inverse, float* c, float* s) {
  double ang = pos * inv_freq;
  *c = static_cast<float>(std::cos(ang) * scale);
  *s = static_cast<float>((inverse ? -std::sin(ang) : std::sin(ang)) * scale);
}

// One head of the reference rope: angles per element. y may be exactly x.
inline void RopeHeadRef(const float* x, float* y, double pos, const double* inv_freq, int64_t half, double scale, bool inverse) {
  for (int64_t i = 0; i < half; ++i) {
    float c, s;
    RopeAngle(pos, inv_freq[i], scale, inverse, &c, &s);
    float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c - x2 * s;
    y[i + half] = x2 * c + x1 * s;
  }
}

// One head of the fast rope from precomputed angles. y may be exactly x.
inline void RopeHeadFast(const float* x, float* y, const float* __restrict c, const float* __restrict s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    float x1 = x[i], x2 = x[i + half];
    y[i] = x1 * c[i] - x2 * s[i];
    y[i + half] = x2 * c[i] + x1 * s[i];
  }
}

// The fast rope's angles: cos/sin once per distinct position (shared by every head and by
// every sequence of a batch: a [64, 32] batch has 32 positions, not 2048 tokens; the double
// sincos per token was 2.5% of a tiny model's training step). A table over [lo, hi] when that
// range is no longer than the tokens (never more angles than one per token); else one row per
// token, computed when asked. Same RopeAngle() either way.
class RopeAngles {
 public:
  RopeAngles(const int32_t* pos, int64_t T, const double* inv_freq, int64_t half, double scale, bool inverse)
      : pos_(pos), inv_freq_(inv_freq), half_(half), scale_(scale), inverse_(inverse) {
    if (T == 0 || half == 0) return;
    lo_ = pos[0];
    int64_t hi = pos[0];
    for (int64_t t = 1; t < T; ++t) {
      lo_ = std::min<int64_t>(lo_, pos[t]);
      hi = std::max<int64_t>(hi, pos[t]);
    }
    table_ = hi - lo_ + 1 <= T;
    const int64_t rows = table_ ? hi - lo_ + 1 : 1;
    cs_.resize(static_cast<size_t>(rows * half));
    sn_.resize(static_cast<size_t>(rows * half));
    if (!table_) return;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        RopeAngle(static_cast<double>(lo_ + r), inv_freq[i], scale, inverse, &cs_[r * half + i], &sn_[r * half + i]);
      }
    }
  }

  // Token t's cos / sin rows (valid until the next call).
  void Row(int64_t t, const float** c, const float** s) {
    int64_t row = 0;
    if (table_) {
      row = pos_[t] - lo_;
    } else {
      for (int64_t i = 0; i < half_; ++i) RopeAngle(pos_[t], inv_freq_[i], scale_, inverse_, &cs_[i], &sn_[i]);
    }
    *c = cs_.data() + row * half_;
    *s = sn_.data() + row * half_;
  }

 private:
  const int32_t* pos_;
  const double* inv_freq_;
  int64_t half_;
  double scale_;
  bool inverse_;
  int64_t lo_ = 0;
  bool table_ = false;
  std::vector<float> cs_, sn_;
};

}  // namespace ascent::model::rows
