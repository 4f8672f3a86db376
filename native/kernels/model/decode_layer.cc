// The decode step's dense layer as one op (decode_layer.h): the separate kernels, called in the
// engine's order, on intermediates in a per-thread scratch.
#include "kernels/model/decode_layer.h"

#include "kernels/fast.h"
#include "kernels/kernel_args.h"
#include "kernels/model/fused_norm.h"
#include "kernels/model/model_kernels.h"
#include "kernels/scratch.h"

namespace ascent::model {
namespace {

// x . w^T for x [m, k] and w [n, k], fp32: the engine's linear() (matmul with transB).
void Linear(const float* x, const float* w, float* out, int64_t m, int64_t n, int64_t k) {
  ascent::fast::Matmul(MatmulArgs{DType::kF32, DType::kF32, x, w, out, 1, m, n, k, false, true});
}

// Element offsets of the intermediates in one scratch, each rounded up to 16 floats (64 bytes).
int64_t Round16(int64_t n) { return (n + 15) & ~int64_t{15}; }

}  // namespace

void fast::DecodeLayer(const DecodeLayerArgs& a) {
  const int64_t B = a.B, H = a.H, D = a.D, I = a.I;
  const int64_t W = (a.nH + 2 * a.nKV) * D, qn = B * a.nH * D, kvn = B * a.nKV * D;
  const int64_t sizes[] = {B * W, qn, kvn, kvn, qn, B * H, B * H, B * H, B * 2 * I, B * I, B * H};
  int64_t total = 0;
  for (int64_t s : sizes) total += Round16(s);
  thread_local ascent::fast::AlignedScratch scratch;
  float* p = scratch.Get<float>(static_cast<size_t>(total));
  float* parts[11];
  for (int i = 0; i < 11; ++i) {
    parts[i] = p;
    p += Round16(sizes[i]);
  }
  float *qkv = parts[0], *q = parts[1], *k = parts[2], *v = parts[3], *attn = parts[4], *o = parts[5];
  float *x1 = parts[6], *h2 = parts[7], *gu = parts[8], *act = parts[9], *m = parts[10];

  Linear(a.h, a.wqkv, qkv, B, W, H);
  const int64_t row = a.nKV * D;
  fast::QkvNormRope(QkvNormRopeArgs{qkv, a.qn, a.kn, a.positions, a.inv_freq, q, k, v, B, a.nH, a.nKV, D, a.eps, a.scale,
                                    KvWriteArgs{k, v, a.positions, a.k_cache, a.v_cache, B, 1, a.Smax, row}});
  fast::AttentionDecode(AttentionDecodeArgs{q, a.k_cache, a.v_cache, a.lengths, attn, B, a.Smax, a.nH, a.nKV, D});
  Linear(attn, a.wo, o, B, H, a.nH * D);
  fast::AddRmsNorm(AddRmsNormArgs{a.x, o, a.post_ln, x1, h2, B, H, a.eps});
  Linear(h2, a.wgu, gu, B, 2 * I, H);
  fast::Swiglu(SwigluArgs{gu, gu + I, act, B, I, 2 * I, 2 * I});
  Linear(act, a.wdown, m, B, H, I);
  fast::AddRmsNorm(AddRmsNormArgs{x1, m, a.next_ln, a.x_out, a.h_out, B, H, a.eps});
}

}  // namespace ascent::model
