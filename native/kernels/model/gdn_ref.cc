// Reference gated delta rule (gdn.h): the recurrence and the chunked WY form in
// double, and the backward through every stored state. Plain loops, per (b, value
// head), obvious rather than fast.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/model/gdn.h"
#include "kernels/model/vec.h"

namespace ascent::model {

bool GdnLive(const int32_t* mask, int64_t T, int64_t b, int64_t t, const char* op) {
  if (mask == nullptr) return true;
  int32_t m = mask[b * T + t];
  if (m != 0 && m != 1) {
    KernelError(std::string(op) + ": mask[" + std::to_string(b) + ", " + std::to_string(t) + "] = " + std::to_string(m) +
                    " is not 0 or 1; GDN takes the 2-D [B, T] padding mask (1 = token, 0 = pad).",
                {Num("batch", static_cast<double>(b)), Num("position", static_cast<double>(t)), Num("value", m)});
  }
  return m == 1;
}

namespace {

using Vec64 = std::vector<double>;

// One (b, value head) sequence in double: normalised q (scaled) and k, their
// inverse norms, v, g, beta and liveness.
struct Head {
  int64_t T, Dk, Dv;
  Vec64 q, k, qn, kn, qr, kr, v, g, beta;
  std::vector<char> live;
};

template <typename A>
Head Load(const A& a, int64_t b, int64_t h, const char* op) {
  const int64_t hk = h / (a.Hv / a.Hk);
  Head s{a.T, a.Dk, a.Dv, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  s.q.resize(a.T * a.Dk);
  s.k.resize(a.T * a.Dk);
  s.qn.resize(a.T * a.Dk);
  s.kn.resize(a.T * a.Dk);
  s.qr.assign(a.T, 1.0);
  s.kr.assign(a.T, 1.0);
  s.v.resize(a.T * a.Dv);
  s.g.resize(a.T);
  s.beta.resize(a.T);
  s.live.resize(a.T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.Dk));
  for (int64_t t = 0; t < a.T; ++t) {
    const float* qp = a.q + ((b * a.T + t) * a.Hk + hk) * a.Dk;
    const float* kp = a.k + ((b * a.T + t) * a.Hk + hk) * a.Dk;
    double qq = 0, kk = 0;
    for (int64_t i = 0; i < a.Dk; ++i) {
      qq += static_cast<double>(qp[i]) * qp[i];
      kk += static_cast<double>(kp[i]) * kp[i];
    }
    if (a.l2norm) {
      s.qr[t] = 1.0 / std::sqrt(qq + 1e-6);
      s.kr[t] = 1.0 / std::sqrt(kk + 1e-6);
    }
    for (int64_t i = 0; i < a.Dk; ++i) {
      s.qn[t * a.Dk + i] = qp[i] * s.qr[t];
      s.kn[t * a.Dk + i] = kp[i] * s.kr[t];
      s.q[t * a.Dk + i] = s.qn[t * a.Dk + i] * scale;
      s.k[t * a.Dk + i] = s.kn[t * a.Dk + i];
    }
    const float* vp = a.v + ((b * a.T + t) * a.Hv + h) * a.Dv;
    for (int64_t j = 0; j < a.Dv; ++j) s.v[t * a.Dv + j] = vp[j];
    s.live[t] = GdnLive(a.mask, a.T, b, t, op);
    s.g[t] = s.live[t] ? a.g[(b * a.T + t) * a.Hv + h] : 0.0;
    s.beta[t] = s.live[t] ? a.beta[(b * a.T + t) * a.Hv + h] : 0.0;
  }
  return s;
}

Vec64 InitialState(const float* h0, int64_t b, int64_t h, int64_t Hv, int64_t n) {
  Vec64 S(n, 0.0);
  if (h0 != nullptr) {
    const float* p = h0 + (b * Hv + h) * n;
    for (int64_t i = 0; i < n; ++i) S[i] = p[i];
  }
  return S;
}

// One token of the recurrence on S; writes o (Dv) when given.
void Step(const Head& s, int64_t t, Vec64& S, double* o) {
  const int64_t Dk = s.Dk, Dv = s.Dv;
  const double a = std::exp(s.g[t]);
  for (double& x : S) x *= a;
  for (int64_t j = 0; j < Dv; ++j) {
    double kv = 0;
    for (int64_t i = 0; i < Dk; ++i) kv += S[i * Dv + j] * s.k[t * Dk + i];
    const double d = s.beta[t] * (s.v[t * Dv + j] - kv);
    for (int64_t i = 0; i < Dk; ++i) S[i * Dv + j] += s.k[t * Dk + i] * d;
  }
  if (o == nullptr) return;
  for (int64_t j = 0; j < Dv; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < Dk; ++i) acc += S[i * Dv + j] * s.q[t * Dk + i];
    o[j] = acc;
  }
}

// One chunk [c0, c0 + n) of the WY form; writes o rows [n, Dv].
void Chunk(const Head& s, int64_t c0, int64_t n, Vec64& S, Vec64& o) {
  const int64_t Dk = s.Dk, Dv = s.Dv;
  Vec64 G(n), U(n * Dv), W(n * Dk), D(n * Dv);
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) G[i] = acc += s.g[c0 + i];
  Vec64 KK(n * n), QK(n * n);  // in-chunk k_i.k_j and q_i.k_j
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double kk = 0, qk = 0;
      for (int64_t c = 0; c < Dk; ++c) {
        kk += s.k[(c0 + i) * Dk + c] * s.k[(c0 + j) * Dk + c];
        qk += s.q[(c0 + i) * Dk + c] * s.k[(c0 + j) * Dk + c];
      }
      KK[i * n + j] = kk;
      QK[i * n + j] = qk;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const double bi = s.beta[c0 + i];
    for (int64_t c = 0; c < Dv; ++c) U[i * Dv + c] = bi * s.v[(c0 + i) * Dv + c];
    for (int64_t c = 0; c < Dk; ++c) W[i * Dk + c] = bi * std::exp(G[i]) * s.k[(c0 + i) * Dk + c];
    for (int64_t j = 0; j < i; ++j) {  // forward substitution: (I + L) [U W] = [beta V, beta e^G K]
      const double l = bi * std::exp(G[i] - G[j]) * KK[i * n + j];
      for (int64_t c = 0; c < Dv; ++c) U[i * Dv + c] -= l * U[j * Dv + c];
      for (int64_t c = 0; c < Dk; ++c) W[i * Dk + c] -= l * W[j * Dk + c];
    }
    for (int64_t c = 0; c < Dv; ++c) {
      double ws = 0;
      for (int64_t r = 0; r < Dk; ++r) ws += W[i * Dk + r] * S[r * Dv + c];
      D[i * Dv + c] = U[i * Dv + c] - ws;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < Dv; ++c) {
      double x = 0;
      for (int64_t r = 0; r < Dk; ++r) x += s.q[(c0 + i) * Dk + r] * S[r * Dv + c];
      x *= std::exp(G[i]);
      for (int64_t j = 0; j <= i; ++j) x += std::exp(G[i] - G[j]) * QK[i * n + j] * D[j * Dv + c];
      o[(c0 + i) * Dv + c] = x;
    }
  }
  const double last = G[n - 1];
  for (int64_t r = 0; r < Dk; ++r) {
    for (int64_t c = 0; c < Dv; ++c) {
      double x = std::exp(last) * S[r * Dv + c];
      for (int64_t j = 0; j < n; ++j) x += std::exp(last - G[j]) * s.k[(c0 + j) * Dk + r] * D[j * Dv + c];
      S[r * Dv + c] = x;
    }
  }
}

void StoreState(float* dst, int64_t b, int64_t h, int64_t Hv, const Vec64& S) {
  if (dst == nullptr) return;
  float* p = dst + (b * Hv + h) * static_cast<int64_t>(S.size());
  for (size_t i = 0; i < S.size(); ++i) p[i] = static_cast<float>(S[i]);
}

// dx of x_hat = x * r (r = 1 / sqrt(sum x^2 + eps)) given d x_hat, when normalised.
void NormBackward(const double* xn, double r, const double* dxn, int64_t n, bool l2, double* dx) {
  if (!l2) {
    for (int64_t i = 0; i < n; ++i) dx[i] += dxn[i];
    return;
  }
  double c = 0;
  for (int64_t i = 0; i < n; ++i) c += xn[i] * dxn[i];
  for (int64_t i = 0; i < n; ++i) dx[i] += r * (dxn[i] - xn[i] * c);
}

}  // namespace

void ref::Gdn(const GdnArgs& a) {
  const int64_t n = a.Dk * a.Dv;
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.Hv; ++h) {
      Head s = Load(a, b, h, "gdn");
      Vec64 S = InitialState(a.h0, b, h, a.Hv, n), o(a.T * a.Dv, 0.0);
      if (a.chunk == 0) {
        for (int64_t t = 0; t < a.T; ++t) {
          if (s.live[t]) Step(s, t, S, &o[t * a.Dv]);
        }
      } else {
        for (int64_t c0 = 0; c0 < a.T; c0 += a.chunk) Chunk(s, c0, std::min(a.chunk, a.T - c0), S, o);
      }
      for (int64_t t = 0; t < a.T; ++t) {
        float* op = a.o + ((b * a.T + t) * a.Hv + h) * a.Dv;
        for (int64_t j = 0; j < a.Dv; ++j) op[j] = s.live[t] ? static_cast<float>(o[t * a.Dv + j]) : 0.0f;
      }
      StoreState(a.ht, b, h, a.Hv, S);
    }
  }
}

void ref::GdnBackward(const GdnBackwardArgs& a) {
  const int64_t Dk = a.Dk, Dv = a.Dv, n = Dk * Dv;
  const int64_t group = a.Hv / a.Hk;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dk));
  Vec64 dqAcc(a.B * a.T * a.Hk * Dk, 0.0), dkAcc(a.B * a.T * a.Hk * Dk, 0.0);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.Hv; ++h) {
      const int64_t hk = h / group;
      Head s = Load(a, b, h, "gdnBackward");
      std::vector<Vec64> states(a.T + 1);
      states[0] = InitialState(a.h0, b, h, a.Hv, n);
      for (int64_t t = 0; t < a.T; ++t) {
        states[t + 1] = states[t];
        if (s.live[t]) Step(s, t, states[t + 1], nullptr);
      }
      Vec64 dS = InitialState(a.dht, b, h, a.Hv, n);
      Vec64 dqh(Dk), dkh(Dk), kv(Dv), dD(Dv), dkv(Dv);
      for (int64_t t = a.T - 1; t >= 0; --t) {
        const int64_t row = (b * a.T + t) * a.Hv + h;
        float* dvp = a.dv + row * Dv;
        if (!s.live[t]) {
          for (int64_t j = 0; j < Dv; ++j) dvp[j] = 0.0f;
          a.dg[row] = 0.0f;
          a.dbeta[row] = 0.0f;
          continue;
        }
        const Vec64& Sprev = states[t];
        const Vec64& St = states[t + 1];
        const double dec = std::exp(s.g[t]), bt = s.beta[t];
        const double* q = &s.q[t * Dk];
        const double* k = &s.k[t * Dk];
        const double* v = &s.v[t * Dv];
        const float* dop = a.dout + row * Dv;
        // o = St^T q
        for (int64_t i = 0; i < Dk; ++i) {
          double x = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            x += St[i * Dv + j] * dop[j];
            dS[i * Dv + j] += q[i] * dop[j];
          }
          dqh[i] = x;
        }
        // St = Sp + k delta^T, delta = beta (v - Sp^T k), Sp = dec * Sprev
        for (int64_t j = 0; j < Dv; ++j) {
          double x = 0, dd = 0;
          for (int64_t i = 0; i < Dk; ++i) {
            x += dec * Sprev[i * Dv + j] * k[i];
            dd += dS[i * Dv + j] * k[i];
          }
          kv[j] = x;
          dD[j] = dd;
        }
        double dbeta = 0;
        for (int64_t j = 0; j < Dv; ++j) {
          dbeta += dD[j] * (v[j] - kv[j]);
          dvp[j] = static_cast<float>(bt * dD[j]);
          dkv[j] = -bt * dD[j];
        }
        double dg = 0;
        for (int64_t i = 0; i < Dk; ++i) {
          double x = 0;
          for (int64_t j = 0; j < Dv; ++j) {
            const double delta = bt * (v[j] - kv[j]);
            const double sp = dec * Sprev[i * Dv + j];
            x += dS[i * Dv + j] * delta + sp * dkv[j];
            double& d = dS[i * Dv + j];
            d += k[i] * dkv[j];  // dSp
            dg += d * sp;
            d *= dec;  // dSprev
          }
          dkh[i] = x;
        }
        a.dg[row] = static_cast<float>(dg);
        a.dbeta[row] = static_cast<float>(dbeta);
        for (int64_t i = 0; i < Dk; ++i) dqh[i] *= scale;
        const int64_t krow = ((b * a.T + t) * a.Hk + hk) * Dk;
        NormBackward(&s.qn[t * Dk], s.qr[t], dqh.data(), Dk, a.l2norm, &dqAcc[krow]);
        NormBackward(&s.kn[t * Dk], s.kr[t], dkh.data(), Dk, a.l2norm, &dkAcc[krow]);
      }
      StoreState(a.dh0, b, h, a.Hv, dS);
    }
  }
  for (size_t i = 0; i < dqAcc.size(); ++i) {
    a.dq[i] = static_cast<float>(dqAcc[i]);
    a.dk[i] = static_cast<float>(dkAcc[i]);
  }
}

}  // namespace ascent::model
