// Rotary position embedding, rotate-half convention (HF Llama / Qwen3: pairs
// (i, i + D/2)) over a host-computed inv_freq table, cos and sin times `scale`
// (HF's attention_scaling of yarn; 1 otherwise). The backward is the inverse
// rotation times the same scale (inverse = true): the transpose of scale·R.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/model/model_kernels.h"

namespace ascent::model {
namespace {

inline void Angle(double pos, double inv_freq, double scale, bool inverse, float* c, float* s) {
  double ang = pos * inv_freq;
  *c = static_cast<float>(std::cos(ang) * scale);
  *s = static_cast<float>((inverse ? -std::sin(ang) : std::sin(ang)) * scale);
}

}  // namespace

void ref::Rope(const RopeArgs& a) {
  const int64_t half = a.D / 2;
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* x = a.x + (t * a.heads + h) * a.D;
      float* y = a.y + (t * a.heads + h) * a.D;
      for (int64_t i = 0; i < half; ++i) {
        float c, s;
        Angle(a.pos[t], a.inv_freq[i], a.scale, a.inverse, &c, &s);
        float x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c - x2 * s;
        y[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

void fast::Rope(const RopeArgs& a) {
  // cos/sin once per distinct position (shared by every head and by every sequence of a
  // batch: a [64, 32] batch has 32 positions, not 2048 tokens; the double sincos per token
  // was 2.5% of a tiny model's training step), then contiguous half-rows.
  const int64_t half = a.D / 2;
  if (a.T == 0 || half == 0) return;
  int64_t lo = a.pos[0], hi = a.pos[0];
  for (int64_t t = 1; t < a.T; ++t) {
    lo = std::min<int64_t>(lo, a.pos[t]);
    hi = std::max<int64_t>(hi, a.pos[t]);
  }
  // A table over [lo, hi] when that range is no longer than the tokens (never more angles
  // than one per token); else one row per token as before. Same Angle() either way.
  const bool table = hi - lo + 1 <= a.T;
  const int64_t rows = table ? hi - lo + 1 : 1;
  std::vector<float> cs(static_cast<size_t>(rows * half)), sn(static_cast<size_t>(rows * half));
  if (table) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        Angle(static_cast<double>(lo + r), a.inv_freq[i], a.scale, a.inverse, &cs[r * half + i], &sn[r * half + i]);
      }
    }
  }
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t row = 0;
    if (table) {
      row = a.pos[t] - lo;
    } else {
      for (int64_t i = 0; i < half; ++i) Angle(a.pos[t], a.inv_freq[i], a.scale, a.inverse, &cs[i], &sn[i]);
    }
    const float* __restrict c = cs.data() + row * half;
    const float* __restrict s = sn.data() + row * half;
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* x = a.x + (t * a.heads + h) * a.D;
      float* y = a.y + (t * a.heads + h) * a.D;
      for (int64_t i = 0; i < half; ++i) {
        float x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c[i] - x2 * s[i];
        y[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

}  // namespace ascent::model
