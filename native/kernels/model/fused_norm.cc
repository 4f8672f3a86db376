// Fused rollout kernels (fused_norm.h): every row goes through the same norm_rows.h code as
// the separate rmsNorm / rope / add kernels, so the fused results equal theirs bit for bit.
#include "kernels/model/fused_norm.h"

#include <cstring>

#include "kernels/model/norm_rows.h"
#include "kernels/model/vec.h"

namespace ascent::model {
void ref::QkvNormRope(const QkvNormRopeArgs& a) {
  const int64_t D = a.D, half = D / 2, W = (a.nH + 2 * a.nKV) * D;
  for (int64_t t = 0; t < a.T; ++t) {
    const float* row = a.qkv + t * W;
    // Head j < nH is q head j, then k heads: normed into the output, rotated in place.
    for (int64_t j = 0; j < a.nH + a.nKV; ++j) {
      const bool is_q = j < a.nH;
      float* y = is_q ? a.q + (t * a.nH + j) * D : a.k + (t * a.nKV + j - a.nH) * D;
      rows::RmsNormRef(row + j * D, is_q ? a.qw : a.kw, y, D, a.eps);
      rows::RopeHeadRef(y, y, a.pos[t], a.inv_freq, half, a.scale, false);
    }
    std::memcpy(a.v + t * a.nKV * D, row + (a.nH + a.nKV) * D, static_cast<size_t>(a.nKV * D) * sizeof(float));
  }
  if (a.kv.k_cache) ref::KvWrite(a.kv);
}

void fast::QkvNormRope(const QkvNormRopeArgs& a) {
  const int64_t D = a.D, half = D / 2, W = (a.nH + 2 * a.nKV) * D;
  const VecOps& v = Vec();
  rows::RopeAngles angles(a.pos, a.T, a.inv_freq, half, a.scale, false);  // nothing for T = 0
  for (int64_t t = 0; t < a.T; ++t) {
    const float* row = a.qkv + t * W;
    const float *c, *s;
    angles.Row(t, &c, &s);
    for (int64_t j = 0; j < a.nH + a.nKV; ++j) {
      const bool is_q = j < a.nH;
      float* y = is_q ? a.q + (t * a.nH + j) * D : a.k + (t * a.nKV + j - a.nH) * D;
      rows::RmsNormFast(v, row + j * D, is_q ? a.qw : a.kw, y, D, a.eps);
      rows::RopeHeadFast(y, y, c, s, half);
    }
    std::memcpy(a.v + t * a.nKV * D, row + (a.nH + a.nKV) * D, static_cast<size_t>(a.nKV * D) * sizeof(float));
  }
  if (a.kv.k_cache) fast::KvWrite(a.kv);
}

void ref::AddRmsNorm(const AddRmsNormArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    float* sum = a.sum + t * a.H;
    for (int64_t i = 0; i < a.H; ++i) sum[i] = a.x[t * a.H + i] + a.d[t * a.H + i];
    rows::RmsNormRef(sum, a.w, a.y + t * a.H, a.H, a.eps);
  }
}

void fast::AddRmsNorm(const AddRmsNormArgs& a) {
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) {
    float* sum = a.sum + t * a.H;
    for (int64_t i = 0; i < a.H; ++i) sum[i] = a.x[t * a.H + i] + a.d[t * a.H + i];
    rows::RmsNormFast(v, sum, a.w, a.y + t * a.H, a.H, a.eps);
  }
}

}  // namespace ascent::model
