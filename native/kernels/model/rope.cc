// Rotary position embedding, rotate-half convention (HF Llama / Qwen3: pairs
// (i, i + D/2)) over a host-computed inv_freq table, cos and sin times `scale`
// (HF's attention_scaling of yarn; 1 otherwise). The backward is the inverse
// rotation times the same scale (inverse = true): the transpose of scale·R.
#include "kernels/model/model_kernels.h"
#include "kernels/model/norm_rows.h"

namespace ascent::model {

void ref::Rope(const RopeArgs& a) {
  const int64_t half = a.D / 2;
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t at = (t * a.heads + h) * a.D;
      rows::RopeHeadRef(a.x + at, a.y + at, a.pos[t], a.inv_freq, half, a.scale, a.inverse);
    }
  }
}

void fast::Rope(const RopeArgs& a) {
  // cos/sin once per distinct position (rows::RopeAngles), then contiguous half-rows.
  const int64_t half = a.D / 2;
  if (a.T == 0 || half == 0) return;
  rows::RopeAngles angles(a.pos, a.T, a.inv_freq, half, a.scale, a.inverse);
  for (int64_t t = 0; t < a.T; ++t) {
    const float *c, *s;
    angles.Row(t, &c, &s);
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t at = (t * a.heads + h) * a.D;
      rows::RopeHeadFast(a.x + at, a.y + at, c, s, half);
    }
  }
}

}  // namespace ascent::model
