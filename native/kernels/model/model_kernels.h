// Numeric kernels of the Qwen3-style dense / MoE model, forward and backward.
// Every kernel has a plain reference version (ascent::model::ref, the executable
// definition: obvious loops, double accumulators where a sum is long) and a fast
// version (ascent::model::fast: one thread per stream, so "fast" means contiguous
// inner loops, AVX2/FMA primitives from vec.h, packing for reuse and the blocked
// matmul of kernels/fast.cc). Both share one argument block per kernel.
//
// Contracts shared by every kernel here:
// - Pointers were bounds-checked by the enqueue layer (native/model_ops.cc);
//   kernels never validate shapes.
// - Data-dependent indices (token ids, expert ids, targets, cache lengths, group
//   offsets) live on the device and are checked when the kernel runs: a bad value
//   throws AscentException(kStreamError) naming it, which becomes the stream's
//   sticky StreamError (no host sync is ever needed to validate them).
// - Tensors are fp32 unless a field says otherwise; accumulation is fp32 (fast) or
//   double (reference).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/dtype.h"

namespace ascent::model {

// ---- embedding.cc ---------------------------------------------------------------
// out[t, :] = table[ids[t], :]; table and out share `dtype` (fp32 or bf16).
struct EmbeddingArgs {
  DType dtype;
  const int32_t* ids;
  const void* table;
  void* out;
  int64_t T, V, H;
};
// dtable = 0; dtable[ids[t], :] += dy[t, :] (fp32, rows added in t order).
struct EmbeddingBackwardArgs {
  const int32_t* ids;
  const float* dy;
  float* dtable;
  int64_t T, V, H;
};

// ---- rmsnorm.cc -----------------------------------------------------------------
// rstd[t] = 1 / sqrt(mean(x[t]^2) + eps); y[t, i] = x[t, i] * rstd[t] * w[i].
struct RmsNormArgs {
  const float* x;
  const float* w;
  float* y;
  float* rstd;
  int64_t T, H;
  float eps;
};
// dx[t, j] = rstd (w_j dy_j - x_j rstd^2 mean_i(dy_i w_i x_i)); dw[i] = sum_t dy x rstd.
struct RmsNormBackwardArgs {
  const float* dy;
  const float* x;
  const float* w;
  const float* rstd;
  float* dx;
  float* dw;
  int64_t T, H;
};

// ---- rope.cc --------------------------------------------------------------------
// Rotate-half RoPE (HF Llama / Qwen3): for i < D/2, with a = pos[t] * inv_freq[i]
// (in double; the host computes the table for the rope type, see src/model/rope-scaling.ts)
// and c = scale cos a, s = scale sin a (each rounded to fp32; scale is HF's attention_scaling):
//   y[i] = x[i] c - x[i + D/2] s,  y[i + D/2] = x[i + D/2] c + x[i] s.
// inverse = true rotates by -a with the same scale (the backward). x and y may alias exactly.
struct RopeArgs {
  const float* x;
  const int32_t* pos;
  float* y;
  const double* inv_freq;  // D/2 entries
  int64_t T, heads, D;
  double scale;
  bool inverse;
};

// ---- attention.cc ---------------------------------------------------------------
// Causal grouped-query attention. q, o: [B, S, nH, D]; k, v: [B, S, nKV, D];
// lse: [B, nH, S]; head h reads kv head h / (nH / nKV); scale = 1 / sqrt(D).
struct AttentionArgs {
  const float* q;
  const float* k;
  const float* v;
  float* o;
  float* lse;
  int64_t B, S, nH, nKV, D;
};
struct AttentionBackwardArgs {
  const float* dout;
  const float* q;
  const float* k;
  const float* v;
  const float* o;
  const float* lse;
  float* dq;
  float* dk;
  float* dv;
  int64_t B, S, nH, nKV, D;
};
// One new query per sequence against a KV cache [B, Smax, nKV, D]: sequence b
// attends to cache positions [0, lengths[b]) (length 0 gives o = 0).
struct AttentionDecodeArgs {
  const float* q;
  const float* k;
  const float* v;
  const int32_t* lengths;
  float* o;
  int64_t B, Smax, nH, nKV, D;
};

// ---- kv_write.cc ----------------------------------------------------------------
// The rollout KV cache's write of k and v [B, count, row] (row = nKV * D) into k_cache /
// v_cache [B, Smax, row]: for b < B and t < count,
//   k_cache[b, pos[b] + t, :] = k[b, t, :] and v_cache[b, pos[b] + t, :] = v[b, t, :].
// Every pos[b] must lie in [0, Smax - count]; all are checked before anything is written.
struct KvWriteArgs {
  const float* k;
  const float* v;
  const int32_t* pos;
  float* k_cache;
  float* v_cache;
  int64_t B, count, Smax, row;
};

// ---- swiglu.cc ------------------------------------------------------------------
// h[n, i] = silu(g[n, i]) * u[n, i] over N rows of width I. Row strides (elements)
// let gate and up be halves of one fused gate_up row ([N, 2I]: g = row, u = row + I).
struct SwigluArgs {
  const float* g;
  const float* u;
  float* h;
  int64_t N, I;
  int64_t g_stride, u_stride;  // h is contiguous [N, I]
};
struct SwigluBackwardArgs {
  const float* dh;  // contiguous [N, I]
  const float* g;
  const float* u;
  float* dg;
  float* du;
  int64_t N, I;
  int64_t g_stride, u_stride;  // dg / du use the same strides as g / u
};

// ---- router.cc ------------------------------------------------------------------
// probs = softmax(logits) per row; the k largest probs (ties -> lower expert index)
// in descending order give indices / weights; renorm divides weights by their sum.
struct RouterArgs {
  const float* logits;
  float* probs;
  float* weights;
  int32_t* indices;
  int64_t T, E, k;
  bool renorm;
};
struct RouterBackwardArgs {
  const float* dweights;
  const float* probs;
  const int32_t* indices;
  float* dlogits;
  int64_t T, E, k;
  bool renorm;
};

// ---- moe.cc ---------------------------------------------------------------------
// Slots s = t * k + j (token t's j-th expert). dispatch: counts[e] = #slots routed
// to e; offsets = exclusive prefix sum (E + 1 entries); order = slot ids sorted by
// expert, stable (ascending slot id inside an expert).
struct MoeDispatchArgs {
  const int32_t* indices;  // [T * k]
  int32_t* counts;
  int32_t* offsets;
  int32_t* order;
  int64_t slots, E;
};
// gather: xs[r] = x[order[r] / k]. gather backward: dx[t] = sum over rows r with
// order[r] / k == t of dxs[r] (accumulated in slot order).
struct MoeGatherArgs {
  const float* x;
  const int32_t* order;
  float* xs;
  int64_t T, k, H;
};
struct MoeGatherBackwardArgs {
  const float* dxs;
  const int32_t* order;
  float* dx;
  int64_t T, k, H;
};
// combine: y[t] = sum_j weights[t, j] * ys[row of slot t*k+j] (j ascending).
struct MoeCombineArgs {
  const float* ys;
  const int32_t* order;
  const float* weights;
  float* y;
  int64_t T, k, H;
};
// dys[r] = weights[order[r]] * dy[order[r] / k]; dweights[s] = dot(dy[s / k], ys[row of s]).
struct MoeCombineBackwardArgs {
  const float* dy;
  const float* ys;
  const int32_t* order;
  const float* weights;
  float* dys;
  float* dweights;
  int64_t T, k, H;
};
// Grouped matmul: rows offsets[e]..offsets[e+1] of x [N, K] use expert e:
// y[rows] = x[rows] . w[e]^T with w [E, M, K] (trans_b), or x[rows] . w[e] with
// w [E, K, M]. x and w share in_dtype (fp32 / bf16); y is out_dtype (fp32 / bf16).
// offsets are checked when the kernel runs (0 = offsets[0] <= ... <= offsets[E] = N).
struct GroupedMatmulArgs {
  DType in_dtype, out_dtype;
  const void* x;
  const void* w;
  const int32_t* offsets;
  void* y;
  int64_t N, K, M, E;
  bool trans_b;
};
// Backward of y = grouped(x, w): dx [N, K] (fp32) and dw [E, ...] in w's layout
// (fp32; zero for experts without rows). dy, x and w share in_dtype. Either output
// may be null (not wanted).
struct GroupedMatmulBackwardArgs {
  DType in_dtype;
  const void* dy;
  const void* x;
  const void* w;
  const int32_t* offsets;
  float* dx;
  float* dw;
  int64_t N, K, M, E;
  bool trans_b;
};

// ---- softmax_ce.cc --------------------------------------------------------------
struct LogSoftmaxArgs {
  const float* logits;
  float* out;
  int64_t T, V;
};
// With z = scale * logits (scale = 1 / temperature): lse[t] = logsumexp(z[t]);
// loss[t] = lse - z[t, target] (mode kLoss) or z[t, target] - lse (mode kLogprob). Rows whose target is ignore_index give 0;
// any other target outside [0, V) fails the op.
enum class CeMode : int { kLoss = 0, kLogprob = 1 };
struct CrossEntropyArgs {
  const float* logits;
  const int32_t* targets;
  float* loss;
  float* lse;
  int64_t T, V;
  int32_t ignore_index;
  CeMode mode;
  float scale;
};
// dlogits[t] = dloss[t] * scale * (softmax(z[t]) - onehot(target)); 0 on ignored rows.
struct CrossEntropyBackwardArgs {
  const float* dloss;
  const float* logits;
  const int32_t* targets;
  const float* lse;
  float* dlogits;
  int64_t T, V;
  int32_t ignore_index;
  float scale;
};

// ---- softmax_entropy.cc ---------------------------------------------------------
// With z = scale * logits, p = softmax(z[t]): lse[t] = logsumexp(z[t]); out[t] = z[t, target] - lse
// (the token log-prob) and out[T + t] = -sum_v p_v log p_v (the exact entropy). Ignored rows give 0.
struct LogprobEntropyArgs {
  const float* logits;
  const int32_t* targets;
  float* out;  // [2T]: log-probs, then entropies
  float* lse;
  int64_t T, V;
  int32_t ignore_index;
  float scale;
};
// dlogits[t, j] = scale * (dout[t] * (onehot(target)_j - p_j) - dout[T + t] * p_j * (log p_j + H_t)); 0 on ignored rows.
struct LogprobEntropyBackwardArgs {
  const float* dout;  // [2T]
  const float* logits;
  const int32_t* targets;
  const float* lse;
  const float* entropy;  // [T]: the forward's H
  float* dlogits;
  int64_t T, V;
  int32_t ignore_index;
  float scale;
};

// ---- adamw.cc -------------------------------------------------------------------
// torch.optim.AdamW: p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps).
struct AdamWArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};
// adamwMulti: AdamW over a list of (param, grad, m, v) of one hyper-parameter set, in list
// order, each entry exactly the single kernel (its own vector body and scalar tail).
struct AdamWMultiArgs {
  std::vector<AdamWArgs> list;
};

// ---- sum_squares.cc -------------------------------------------------------------
// out[0] = Σ over the list of Σ x², each tensor's sum exactly the 1x1 matmul x·xᵀ of the
// matmul kernels (fp32 accumulation), combined by fp32 adds in list order: bitwise what
// matmul(row, row, transB) per tensor followed by add() of the partial sums gives.
struct SumSquaresArgs {
  std::vector<std::pair<const float*, int64_t>> list;  // (data, numel), numel >= 1
  float* out;
};

// ---- sampling.cc ----------------------------------------------------------------
// Philox4x32-10 (Salmon et al., SC'11; the counter-based RNG of cuRAND and
// torch.cuda): key = (seed lo, seed hi), counter = (offset lo, offset hi, row, 0).
// Row b of a call draws u = (out[0] >> 8) * 2^-24 in [0, 1) from that counter only,
// so the same (seed, offset, row) gives the same draw on any stream or thread.
// Sampling: temperature 0 -> argmax (ties -> lower index). Otherwise keep the top_k
// largest logits (0 = all; ties -> lower index), then the shortest most-likely
// prefix whose softmax mass (logit / temperature, in double) reaches top_p (>= 1
// keeps all), and pick by inverse CDF over the kept tokens in ascending token id
// (exact steps in sampling.cc).
struct SampleArgs {
  const float* logits;
  int32_t* out;
  int64_t B, V;
  float temperature;
  int64_t top_k;
  double top_p;
  uint64_t seed, offset;
};
void Philox4x32(uint32_t key[2], uint32_t ctr[4], uint32_t out[4]);

namespace ref {
void Embedding(const EmbeddingArgs& a);
void EmbeddingBackward(const EmbeddingBackwardArgs& a);
void RmsNorm(const RmsNormArgs& a);
void RmsNormBackward(const RmsNormBackwardArgs& a);
void Rope(const RopeArgs& a);
void Attention(const AttentionArgs& a);
void AttentionBackward(const AttentionBackwardArgs& a);
void AttentionDecode(const AttentionDecodeArgs& a);
void KvWrite(const KvWriteArgs& a);
void Swiglu(const SwigluArgs& a);
void SwigluBackward(const SwigluBackwardArgs& a);
void Router(const RouterArgs& a);
void RouterBackward(const RouterBackwardArgs& a);
void MoeDispatch(const MoeDispatchArgs& a);
void MoeGather(const MoeGatherArgs& a);
void MoeGatherBackward(const MoeGatherBackwardArgs& a);
void MoeCombine(const MoeCombineArgs& a);
void MoeCombineBackward(const MoeCombineBackwardArgs& a);
void GroupedMatmul(const GroupedMatmulArgs& a);
void GroupedMatmulBackward(const GroupedMatmulBackwardArgs& a);
void LogSoftmax(const LogSoftmaxArgs& a);
void CrossEntropy(const CrossEntropyArgs& a);
void CrossEntropyBackward(const CrossEntropyBackwardArgs& a);
void TokenLogprobsEntropy(const LogprobEntropyArgs& a);
void TokenLogprobsEntropyBackward(const LogprobEntropyBackwardArgs& a);
void AdamW(const AdamWArgs& a);
void AdamWMulti(const AdamWMultiArgs& a);
void SumSquares(const SumSquaresArgs& a);
void Sample(const SampleArgs& a);
}  // namespace ref

namespace fast {
void Embedding(const EmbeddingArgs& a);
void EmbeddingBackward(const EmbeddingBackwardArgs& a);
void RmsNorm(const RmsNormArgs& a);
void RmsNormBackward(const RmsNormBackwardArgs& a);
void Rope(const RopeArgs& a);
void Attention(const AttentionArgs& a);
void AttentionBackward(const AttentionBackwardArgs& a);
void AttentionDecode(const AttentionDecodeArgs& a);
void KvWrite(const KvWriteArgs& a);
void Swiglu(const SwigluArgs& a);
void SwigluBackward(const SwigluBackwardArgs& a);
void Router(const RouterArgs& a);
void RouterBackward(const RouterBackwardArgs& a);
void MoeDispatch(const MoeDispatchArgs& a);
void MoeGather(const MoeGatherArgs& a);
void MoeGatherBackward(const MoeGatherBackwardArgs& a);
void MoeCombine(const MoeCombineArgs& a);
void MoeCombineBackward(const MoeCombineBackwardArgs& a);
void GroupedMatmul(const GroupedMatmulArgs& a);
void GroupedMatmulBackward(const GroupedMatmulBackwardArgs& a);
void LogSoftmax(const LogSoftmaxArgs& a);
void CrossEntropy(const CrossEntropyArgs& a);
void CrossEntropyBackward(const CrossEntropyBackwardArgs& a);
void TokenLogprobsEntropy(const LogprobEntropyArgs& a);
void TokenLogprobsEntropyBackward(const LogprobEntropyBackwardArgs& a);
void AdamW(const AdamWArgs& a);
void AdamWMulti(const AdamWMultiArgs& a);
void SumSquares(const SumSquaresArgs& a);
void Sample(const SampleArgs& a);
}  // namespace fast

}  // namespace ascent::model
