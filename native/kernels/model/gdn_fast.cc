// Fast gated delta rule (gdn.h): fp32 state rows of Dv contiguous floats driven by
// the vec.h primitives (dot / axpy / scale / vecmat). Forward: the recurrence
// (decode) or the chunked WY form (prefill, training); backward: the recurrence in
// reverse from a state checkpoint per chunk of 64 tokens, the states inside a chunk
// recomputed (memory O(T / 64 * Dk * Dv) per head instead of O(T * Dk * Dv)).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/model/gdn.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

using VecF = std::vector<float>;
constexpr int64_t kCheckpoint = 64;

// out = x * r * mul with r = 1 / sqrt(sum x^2 + 1e-6) when l2 (else r = 1); returns r.
float Normalise(const VecOps& v, const float* x, int64_t n, bool l2, float mul, float* out) {
  float r = l2 ? 1.0f / std::sqrt(v.dot(x, x, n) + 1e-6f) : 1.0f;
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * r * mul;
  return r;
}

// Token rows [t0, t0 + n) of one (b, value head): q (scaled), k, v, g, beta, live.
struct Rows {
  VecF q, k, v, g, beta, qr, kr;
  std::vector<char> live;
  Rows(int64_t C, int64_t Dk, int64_t Dv) : q(C * Dk), k(C * Dk), v(C * Dv), g(C), beta(C), qr(C), kr(C), live(C) {}
};

template <typename A>
void LoadRows(const VecOps& vo, const A& a, int64_t b, int64_t h, int64_t t0, int64_t n, Rows& r, const char* op) {
  const int64_t hk = h / (a.Hv / a.Hk);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.Dk));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = t0 + i;
    const int64_t krow = ((b * a.T + t) * a.Hk + hk) * a.Dk, row = (b * a.T + t) * a.Hv + h;
    r.qr[i] = Normalise(vo, a.q + krow, a.Dk, a.l2norm, scale, &r.q[i * a.Dk]);
    r.kr[i] = Normalise(vo, a.k + krow, a.Dk, a.l2norm, 1.0f, &r.k[i * a.Dk]);
    std::memcpy(&r.v[i * a.Dv], a.v + row * a.Dv, sizeof(float) * a.Dv);
    r.live[i] = GdnLive(a.mask, a.T, b, t, op);
    r.g[i] = r.live[i] ? a.g[row] : 0.0f;
    r.beta[i] = r.live[i] ? a.beta[row] : 0.0f;
  }
}

void LoadState(const float* src, int64_t b, int64_t h, int64_t Hv, int64_t n, float* S) {
  if (src == nullptr) {
    std::fill(S, S + n, 0.0f);
  } else {
    std::memcpy(S, src + (b * Hv + h) * n, sizeof(float) * n);
  }
}

// One token: S <- e^g S + k delta^T; kv and delta are scratch [Dv]; o (optional) = S^T q.
void Step(const VecOps& vo, const Rows& r, int64_t i, int64_t Dk, int64_t Dv, float* S, float* kv, float* delta, float* o) {
  const float dec = std::exp(r.g[i]), bt = r.beta[i];
  const float* k = &r.k[i * Dk];
  vo.vecmat(k, S, Dv, Dk, Dv, kv);
  for (int64_t j = 0; j < Dv; ++j) delta[j] = bt * (r.v[i * Dv + j] - dec * kv[j]);
  for (int64_t c = 0; c < Dk; ++c) {
    float* row = S + c * Dv;
    vo.scale(row, dec, Dv);
    vo.axpy(row, k[c], delta, Dv);
  }
  if (o != nullptr) vo.vecmat(&r.q[i * Dk], S, Dv, Dk, Dv, o);
}

void StoreOut(const GdnArgs& a, int64_t b, int64_t h, int64_t t, bool live, const float* o) {
  float* dst = a.o + ((b * a.T + t) * a.Hv + h) * a.Dv;
  if (live) {
    std::memcpy(dst, o, sizeof(float) * a.Dv);
  } else {
    std::fill(dst, dst + a.Dv, 0.0f);
  }
}

// The WY form over one chunk of n rows, updating S and writing o.
void Chunk(const VecOps& vo, const GdnArgs& a, int64_t b, int64_t h, int64_t t0, int64_t n, const Rows& r, float* S,
           VecF& G, VecF& U, VecF& W, VecF& D, VecF& tmp) {
  const int64_t Dk = a.Dk, Dv = a.Dv;
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) G[i] = acc += r.g[i];
  for (int64_t i = 0; i < n; ++i) {
    const float bi = r.beta[i], ei = std::exp(G[i]);
    float* Ui = &U[i * Dv];
    float* Wi = &W[i * Dk];
    for (int64_t c = 0; c < Dv; ++c) Ui[c] = bi * r.v[i * Dv + c];
    for (int64_t c = 0; c < Dk; ++c) Wi[c] = bi * ei * r.k[i * Dk + c];
    if (bi != 0.0f) {
      for (int64_t j = 0; j < i; ++j) {
        const float l = bi * std::exp(G[i] - G[j]) * vo.dot(&r.k[i * Dk], &r.k[j * Dk], Dk);
        vo.axpy(Ui, -l, &U[j * Dv], Dv);
        vo.axpy(Wi, -l, &W[j * Dk], Dk);
      }
    }
    vo.vecmat(Wi, S, Dv, Dk, Dv, &D[i * Dv]);
    for (int64_t c = 0; c < Dv; ++c) D[i * Dv + c] = Ui[c] - D[i * Dv + c];
  }
  for (int64_t i = 0; i < n; ++i) {
    float* o = tmp.data();
    const float* q = &r.q[i * Dk];
    vo.vecmat(q, S, Dv, Dk, Dv, o);
    vo.scale(o, std::exp(G[i]), Dv);
    for (int64_t j = 0; j <= i; ++j) {
      const float c = std::exp(G[i] - G[j]) * vo.dot(q, &r.k[j * Dk], Dk);
      if (c != 0.0f) vo.axpy(o, c, &D[j * Dv], Dv);
    }
    StoreOut(a, b, h, t0 + i, r.live[i], o);
  }
  const float last = G[n - 1], el = std::exp(last);
  VecF coef(n);
  float* add = tmp.data();
  for (int64_t c = 0; c < Dk; ++c) {
    for (int64_t j = 0; j < n; ++j) coef[j] = std::exp(last - G[j]) * r.k[j * Dk + c];
    vo.vecmat(coef.data(), D.data(), Dv, n, Dv, add);
    float* row = S + c * Dv;
    vo.scale(row, el, Dv);
    vo.axpy(row, 1.0f, add, Dv);
  }
}

}  // namespace

void fast::Gdn(const GdnArgs& a) {
  const VecOps& vo = Vec();
  const int64_t Dk = a.Dk, Dv = a.Dv, n = Dk * Dv;
  const int64_t C = a.chunk > 0 ? a.chunk : 64;
  Rows r(C, Dk, Dv);
  VecF S(n), kv(Dv), delta(Dv), o(Dv), G(C), U(C * Dv), W(C * Dk), D(C * Dv), tmp(Dv);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.Hv; ++h) {
      LoadState(a.h0, b, h, a.Hv, n, S.data());
      for (int64_t t0 = 0; t0 < a.T; t0 += C) {
        const int64_t m = std::min(C, a.T - t0);
        LoadRows(vo, a, b, h, t0, m, r, "gdn");
        if (a.chunk > 0) {
          Chunk(vo, a, b, h, t0, m, r, S.data(), G, U, W, D, tmp);
          continue;
        }
        for (int64_t i = 0; i < m; ++i) {
          if (r.live[i]) Step(vo, r, i, Dk, Dv, S.data(), kv.data(), delta.data(), o.data());
          StoreOut(a, b, h, t0 + i, r.live[i], o.data());
        }
      }
      if (a.ht != nullptr) std::memcpy(a.ht + (b * a.Hv + h) * n, S.data(), sizeof(float) * n);
    }
  }
}

void fast::GdnBackward(const GdnBackwardArgs& a) {
  const VecOps& vo = Vec();
  const int64_t Dk = a.Dk, Dv = a.Dv, n = Dk * Dv, C = kCheckpoint;
  const int64_t nChunks = (a.T + C - 1) / C;
  std::fill(a.dq, a.dq + a.B * a.T * a.Hk * Dk, 0.0f);
  std::fill(a.dk, a.dk + a.B * a.T * a.Hk * Dk, 0.0f);
  Rows r(C, Dk, Dv);
  VecF checkpoints((nChunks + 1) * n), states((C + 1) * n), dS(n), kv(Dv), delta(Dv), dD(Dv), dkv(Dv), dqh(Dk), dkh(Dk);
  const int64_t hkOf = a.Hv / a.Hk;
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.Hv; ++h) {
      float* cp = checkpoints.data();
      LoadState(a.h0, b, h, a.Hv, n, cp);
      for (int64_t c = 0; c < nChunks; ++c) {
        const int64_t t0 = c * C, m = std::min(C, a.T - t0);
        std::memcpy(cp + (c + 1) * n, cp + c * n, sizeof(float) * n);
        LoadRows(vo, a, b, h, t0, m, r, "gdnBackward");
        for (int64_t i = 0; i < m; ++i) {
          if (r.live[i]) Step(vo, r, i, Dk, Dv, cp + (c + 1) * n, kv.data(), delta.data(), nullptr);
        }
      }
      LoadState(a.dht, b, h, a.Hv, n, dS.data());
      for (int64_t c = nChunks - 1; c >= 0; --c) {
        const int64_t t0 = c * C, m = std::min(C, a.T - t0);
        LoadRows(vo, a, b, h, t0, m, r, "gdnBackward");
        std::memcpy(states.data(), cp + c * n, sizeof(float) * n);
        for (int64_t i = 0; i < m; ++i) {
          std::memcpy(&states[(i + 1) * n], &states[i * n], sizeof(float) * n);
          if (r.live[i]) Step(vo, r, i, Dk, Dv, &states[(i + 1) * n], kv.data(), delta.data(), nullptr);
        }
        for (int64_t i = m - 1; i >= 0; --i) {
          const int64_t t = t0 + i, row = (b * a.T + t) * a.Hv + h;
          float* dvp = a.dv + row * Dv;
          if (!r.live[i]) {
            std::fill(dvp, dvp + Dv, 0.0f);
            a.dg[row] = 0.0f;
            a.dbeta[row] = 0.0f;
            continue;
          }
          const float* Sprev = &states[i * n];
          const float* St = &states[(i + 1) * n];
          const float dec = std::exp(r.g[i]), bt = r.beta[i];
          const float* q = &r.q[i * Dk];
          const float* k = &r.k[i * Dk];
          const float* v = &r.v[i * Dv];
          const float* dop = a.dout + row * Dv;
          for (int64_t c2 = 0; c2 < Dk; ++c2) {
            dqh[c2] = vo.dot(St + c2 * Dv, dop, Dv);
            vo.axpy(&dS[c2 * Dv], q[c2], dop, Dv);
          }
          vo.vecmat(k, Sprev, Dv, Dk, Dv, kv.data());
          vo.vecmat(k, dS.data(), Dv, Dk, Dv, dD.data());
          float dbeta = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            kv[j] *= dec;
            delta[j] = bt * (v[j] - kv[j]);
            dbeta += dD[j] * (v[j] - kv[j]);
            dvp[j] = bt * dD[j];
            dkv[j] = -bt * dD[j];
          }
          float dg = 0;
          for (int64_t c2 = 0; c2 < Dk; ++c2) {
            float* dSr = &dS[c2 * Dv];
            const float* Sr = Sprev + c2 * Dv;
            dkh[c2] = vo.dot(dSr, delta.data(), Dv) + dec * vo.dot(Sr, dkv.data(), Dv);
            vo.axpy(dSr, k[c2], dkv.data(), Dv);
            dg += dec * vo.dot(dSr, Sr, Dv);
            vo.scale(dSr, dec, Dv);
          }
          a.dg[row] = dg;
          a.dbeta[row] = dbeta;
          // Through the normalisation (x_hat = x r; q also scaled): dx += r (dx_hat - x_hat (x_hat . dx_hat)).
          const int64_t krow = ((b * a.T + t) * a.Hk + h / hkOf) * Dk;
          const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
          for (int64_t c2 = 0; c2 < Dk; ++c2) dqh[c2] *= scale;
          for (int side = 0; side < 2; ++side) {
            const float* raw = (side == 0 ? a.q : a.k) + krow;
            const float* dxh = side == 0 ? dqh.data() : dkh.data();
            float* dst = (side == 0 ? a.dq : a.dk) + krow;
            const float rr = side == 0 ? r.qr[i] : r.kr[i];
            if (!a.l2norm) {
              vo.axpy(dst, 1.0f, dxh, Dk);
              continue;
            }
            const float c3 = rr * rr * vo.dot(raw, dxh, Dk);
            for (int64_t c2 = 0; c2 < Dk; ++c2) dst[c2] += rr * (dxh[c2] - raw[c2] * c3);
          }
        }
      }
      if (a.dh0 != nullptr) std::memcpy(a.dh0 + (b * a.Hv + h) * n, dS.data(), sizeof(float) * n);
    }
  }
}

}  // namespace ascent::model
