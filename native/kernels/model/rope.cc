// Rotary position embedding, rotate-half convention (HF Llama / Qwen3: pairs
// (i, i + D/2)) over a host-computed inv_freq table, cos and sin times `scale`
// (HF's attention_scaling of yarn; 1 otherwise). The backward is the inverse
// rotation times the same scale (inverse = true): the transpose of scale·R.
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
  // cos/sin once per position (shared by every head), then contiguous half-rows.
  const int64_t half = a.D / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < a.T; ++t) {
    const double pos = a.pos[t];
    for (int64_t i = 0; i < half; ++i) Angle(pos, a.inv_freq[i], a.scale, a.inverse, &cs[i], &sn[i]);
    for (int64_t h = 0; h < a.heads; ++h) {
      const float* x = a.x + (t * a.heads + h) * a.D;
      float* y = a.y + (t * a.heads + h) * a.D;
      const float* __restrict c = cs.data();
      const float* __restrict s = sn.data();
      for (int64_t i = 0; i < half; ++i) {
        float x1 = x[i], x2 = x[i + half];
        y[i] = x1 * c[i] - x2 * s[i];
        y[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

}  // namespace ascent::model
