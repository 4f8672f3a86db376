// Gated DeltaNet kernels (Qwen3-Next / Qwen3.5 linear-attention layers), forward
// and backward, reference (double accumulators) and fast (fp32, vec.h rows) side
// by side, with the same contracts as model_kernels.h.
//
// The gated delta rule, per batch b and value head h (key head h / (Hv / Hk)),
// state S [Dk, Dv]; q and k optionally L2-normalised (x / sqrt(sum x^2 + 1e-6)),
// q then scaled by 1 / sqrt(Dk). For every token t whose mask is 1 (no mask: all):
//   S <- exp(g_t) S;  kv = S^T k_t;  delta = beta_t (v_t - kv);  S <- S + k_t delta^T;
//   o_t = S^T q_t.
// A token whose mask is 0 leaves S untouched (no decay) and gets o_t = 0; its
// gradients are 0. Mask values other than 0 / 1 fail the op when it runs.
// chunk == 0 runs the recurrence token by token; chunk = C > 0 runs the chunked
// (WY) form: per chunk, with G the in-chunk cumulative sum of g,
//   (I + L) delta = beta V - diag(beta e^G) K S0,  L_ij = beta_i e^(G_i - G_j) k_i.k_j (i > j),
//   o_i = e^(G_i) S0^T q_i + sum_{j <= i} e^(G_i - G_j) (q_i.k_j) delta_j,
//   S_C = e^(G_C) S0 + sum_j e^(G_C - G_j) k_j delta_j^T,
// the same function as the recurrence (equal within rounding).
#pragma once

#include <cstdint>

namespace ascent::model {

// Layouts: q, k [B, T, Hk, Dk]; v, o [B, T, Hv, Dv]; g, beta [B, T, Hv];
// mask [B, T] int32 (optional); h0, ht [B, Hv, Dk, Dv] (both optional).
struct GdnArgs {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  const int32_t* mask;
  const float* h0;
  float* o;
  float* ht;
  int64_t B, T, Hk, Hv, Dk, Dv;
  int64_t chunk;  // 0: recurrent
  bool l2norm;
};

// Backward of gdn from do (and dht, optional): dq, dk [B, T, Hk, Dk] (summed over
// the value heads sharing a key head), dv, dg, dbeta, dh0 (optional). Recomputes
// the states from h0 (reference: every state kept; fast: a checkpoint per chunk of
// 64 tokens, the states inside a chunk recomputed), so it serves both forms.
struct GdnBackwardArgs {
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  const int32_t* mask;
  const float* h0;
  const float* dout;
  const float* dht;
  float* dq;
  float* dk;
  float* dv;
  float* dg;
  float* dbeta;
  float* dh0;
  int64_t B, T, Hk, Hv, Dk, Dv;
  bool l2norm;
};

// Causal depthwise conv1d over time, x and y [B, T, C] (channels last), w [C, K]:
//   pre[t, c] = sum_j w[c, j] * xin[t - (K - 1) + j, c],  y = silu(pre) (or pre),
// where xin at negative times reads the conv state s0 [B, C, K - 1] (oldest first;
// zeros when absent). sT (optional) receives the last K - 1 inputs of concat(s0, x):
// the state to continue from (decode: T = 1 with s0 = the cache).
struct CausalConvArgs {
  const float* x;
  const float* w;
  const float* s0;
  float* y;
  float* st;
  int64_t B, T, C, K;
  bool silu;
};
// dx [B, T, C], dw [C, K], ds0 [B, C, K - 1] (optional) from dy.
struct CausalConvBackwardArgs {
  const float* dy;
  const float* x;
  const float* w;
  const float* s0;
  float* dx;
  float* dw;
  float* ds0;
  int64_t B, T, C, K;
  bool silu;
};

// Gated RMSNorm (Qwen3NextRMSNormGated): rows of width H,
//   rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * w * silu(z).
struct GatedRmsNormArgs {
  const float* x;
  const float* z;
  const float* w;
  float* y;
  float* rstd;
  int64_t N, H;
  float eps;
};
struct GatedRmsNormBackwardArgs {
  const float* dy;
  const float* x;
  const float* z;
  const float* w;
  const float* rstd;
  float* dx;
  float* dz;
  float* dw;
  int64_t N, H;
};

// GDN gating over N rows of H heads: g = -exp(A_log[h]) * softplus(a + dt_bias[h])
// (softplus(x) = x above 20, as torch), beta = sigmoid(b).
struct GdnGatingArgs {
  const float* a;
  const float* b;
  const float* a_log;
  const float* dt_bias;
  float* g;
  float* beta;
  int64_t N, H;
};
// da, db [N, H]; dA_log, ddt_bias [H] (summed over rows).
struct GdnGatingBackwardArgs {
  const float* dg;
  const float* dbeta;
  const float* a;
  const float* b;
  const float* a_log;
  const float* dt_bias;
  float* da;
  float* db;
  float* da_log;
  float* ddt_bias;
  int64_t N, H;
};

namespace ref {
void Gdn(const GdnArgs& a);
void GdnBackward(const GdnBackwardArgs& a);
void CausalConv(const CausalConvArgs& a);
void CausalConvBackward(const CausalConvBackwardArgs& a);
void GatedRmsNorm(const GatedRmsNormArgs& a);
void GatedRmsNormBackward(const GatedRmsNormBackwardArgs& a);
void GdnGating(const GdnGatingArgs& a);
void GdnGatingBackward(const GdnGatingBackwardArgs& a);
}  // namespace ref

namespace fast {
void Gdn(const GdnArgs& a);
void GdnBackward(const GdnBackwardArgs& a);
void CausalConv(const CausalConvArgs& a);
void CausalConvBackward(const CausalConvBackwardArgs& a);
void GatedRmsNorm(const GatedRmsNormArgs& a);
void GatedRmsNormBackward(const GatedRmsNormBackwardArgs& a);
void GdnGating(const GdnGatingArgs& a);
void GdnGatingBackward(const GdnGatingBackwardArgs& a);
}  // namespace fast

// Shared by both implementations (defined in gdn_ref.cc): fails the op on a mask value
// other than 0 / 1; returns true when token (b, t) is live.
bool GdnLive(const int32_t* mask, int64_t T, int64_t b, int64_t t, const char* op);

}  // namespace ascent::model
