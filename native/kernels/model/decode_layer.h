// One dense decoder layer of the rollout engine's decode step (src/rollout/forward.ts at tp = 1,
// fp32 weights, fast kernels) as one op: the nine kernels the engine enqueued one by one per
// layer and decoded token, run here in the same order on the same inputs, so every output is the
// same bits. At the tiny models' sizes an op costs mostly its dispatch (JS checks, tensor
// objects, the enqueue), so one op per layer instead of nine is most of the engine's CPU.
#pragma once

#include <cstdint>

namespace ascent::model {

// With W = (nH + 2 nKV) D, for the B rows of this step (one new token each):
//   qkv = h . wqkv^T                                  [B, W]      fast::Matmul
//   q, k, v = qkvNormRope(qkv, qn, kn, positions)      + KV cache write at positions
//   a = attentionDecode(q, kCache, vCache, lengths)    [B, nH D]
//   o = a . wo^T                                       [B, H]
//   x1, h2 = addRmsNorm(x, o, postLn)                  [B, H]
//   gu = h2 . wgu^T                                    [B, 2I]
//   act = swiglu(gu[:, :I], gu[:, I:])                 [B, I]
//   m = act . wdown^T                                  [B, H]
//   xOut, hOut = addRmsNorm(x1, m, nextLn)             [B, H]
// Intermediates live in a per-thread scratch, each 64-byte aligned like a device buffer.
struct DecodeLayerArgs {
  const float* x;  // residual stream [B, H]
  const float* h;  // rmsNorm(x) by this layer's input norm [B, H]
  const float* wqkv;
  const float* qn;
  const float* kn;
  const float* wo;
  const float* post_ln;
  const float* wgu;
  const float* wdown;
  const float* next_ln;
  const int32_t* positions;  // [B]: the new token's position, also its KV cache slot
  const int32_t* lengths;    // [B]: valid cache length after the write
  const double* inv_freq;    // D/2 entries
  float* k_cache;            // [B, Smax, nKV, D]
  float* v_cache;
  float* x_out;  // [B, H]
  float* h_out;  // [B, H]
  int64_t B, H, nH, nKV, D, I, Smax;
  float eps;
  double scale;
};

namespace fast {
void DecodeLayer(const DecodeLayerArgs& a);
}  // namespace fast

}  // namespace ascent::model
