// Fused kernels of the rollout engine's forward (src/rollout/forward.ts), each the exact
// composition of separate kernels it replaces (same per-row code, norm_rows.h, so the same
// bits), to cut stream ops per decoded token: at the engine's tiny-model sizes an op costs
// mostly its dispatch. Reference and fast versions as in model_kernels.h.
#pragma once

#include <cstdint>

#include "kernels/model/model_kernels.h"

namespace ascent::model {

// The q/k/v epilogue of one matmul against a whole qkv_proj: qkv [T, W] with row stride
// W = (nH + 2 nKV) D holds q heads, then k heads, then v heads. For every token t:
//   q[t, h] = rope(rmsNorm(qkv[t, h], qw), pos[t])            h < nH
//   k[t, h] = rope(rmsNorm(qkv[t, nH + h], kw), pos[t])       h < nKV
//   v[t, h] = qkv[t, nH + nKV + h]                            h < nKV
// with rmsNorm / rope exactly those of RmsNormArgs / RopeArgs (not inverse). q [T, nH, D],
// k and v [T, nKV, D] contiguous. When kv.k_cache is set, the op then does the KV cache write
// of k and v (KvWriteArgs, kv.k = k and kv.v = v, T = kv.B * kv.count) exactly as kvCacheWrite.
struct QkvNormRopeArgs {
  const float* qkv;
  const float* qw;  // [D]
  const float* kw;  // [D]
  const int32_t* pos;
  const double* inv_freq;  // D/2 entries
  float* q;
  float* k;
  float* v;
  int64_t T, nH, nKV, D;
  float eps;
  double scale;
  KvWriteArgs kv;  // kv.k_cache null: no cache write
};

// The residual add and the next RMSNorm: sum = x + d (fp32 add), y = rmsNorm(sum, w) over
// rows of H (no rstd: inference only).
struct AddRmsNormArgs {
  const float* x;
  const float* d;
  const float* w;
  float* sum;
  float* y;
  int64_t T, H;
  float eps;
};

namespace ref {
void QkvNormRope(const QkvNormRopeArgs& a);
void AddRmsNorm(const AddRmsNormArgs& a);
}  // namespace ref

namespace fast {
void QkvNormRope(const QkvNormRopeArgs& a);
void AddRmsNorm(const AddRmsNormArgs& a);
}  // namespace fast

}  // namespace ascent::model
