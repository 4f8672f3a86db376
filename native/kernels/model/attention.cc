// Causal grouped-query attention (softmax(q k^T / sqrt(D)) v with query i seeing
// keys j <= i), its backward from the saved log-sum-exp, and single-token decode
// against a KV cache.
//
// Backward (FlashAttention-2 form): P = exp(S - lse), dV = P^T dO, dP = dO V^T,
// Di = rowsum(dO * O), dS = P * (dP - Di), dQ = scale dS K, dK = scale dS^T Q.
// Query heads of one group add into their shared kv head's dK / dV.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/model/attention_scores.h"
#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

inline size_t Idx(int64_t b, int64_t s, int64_t S, int64_t h, int64_t nh, int64_t d, int64_t D) {
  return static_cast<size_t>(((b * S + s) * nh + h) * D + d);
}

double DotD(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

void CheckLength(int32_t len, int64_t b, int64_t smax) {
  if (len < 0 || len > smax) {
    KernelError("attentionDecode: lengths[" + std::to_string(b) + "] = " + std::to_string(len) +
                    " is outside [0, " + std::to_string(smax) + "] (the cache holds " + std::to_string(smax) +
                    " positions).",
                {Num("batch", static_cast<double>(b)), Num("length", len), Num("maxLength", static_cast<double>(smax))});
  }
}

// Packs rows [0, n) of kv head `kh` of sequence b ([B, S, nKV, D]) into dst [n, D].
void PackHead(const float* src, int64_t b, int64_t kh, int64_t n, int64_t S, int64_t nKV, int64_t D, float* dst) {
  for (int64_t j = 0; j < n; ++j) std::memcpy(dst + j * D, src + Idx(b, j, S, kh, nKV, 0, D), static_cast<size_t>(D) * 4);
}

// Packs kv head `kh` of sequence b transposed: dst[d * ld + j] = src[b, j, kh, d] (ld >= S; the
// columns from S on are left as they are), so the scores of one query against keys 0..i are D
// contiguous axpys (no horizontal sums).
void PackHeadT(const float* src, int64_t b, int64_t kh, int64_t S, int64_t nKV, int64_t D, int64_t ld, float* dst) {
  for (int64_t j = 0; j < S; ++j) {
    const float* row = src + Idx(b, j, S, kh, nKV, 0, D);
    for (int64_t d = 0; d < D; ++d) dst[d * ld + j] = row[d];
  }
}

// Prefetches the rows of sequence b that one (sequence, kv head) step of the backward reads: k
// and v of head kh, and q, dO and o of its query heads. In a training step they were written long
// before (the forward) and are no longer in cache, and the step's first touches (scalar
// transposes, one dot per row) would wait on each miss in turn.
void PrefetchBackwardRows(const AttentionBackwardArgs& a, int64_t b, int64_t kh) {
  const int64_t group = a.nH / a.nKV, D = a.D;
  for (int64_t j = 0; j < a.S; ++j) {
    for (int64_t d = 0; d < D; d += 16) {
      __builtin_prefetch(a.k + Idx(b, j, a.S, kh, a.nKV, d, D), 0, 2);
      __builtin_prefetch(a.v + Idx(b, j, a.S, kh, a.nKV, d, D), 0, 2);
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
        __builtin_prefetch(a.q + Idx(b, j, a.S, h, a.nH, d, D), 0, 2);
        __builtin_prefetch(a.dout + Idx(b, j, a.S, h, a.nH, d, D), 0, 2);
        __builtin_prefetch(a.o + Idx(b, j, a.S, h, a.nH, d, D), 0, 2);
      }
    }
  }
}

// p[j] = q . K[j] for j < n, with Kt = K transposed ([D, ld]).
inline void Scores(const VecOps& v, const float* q, const float* Kt, int64_t ld, int64_t D, int64_t n, float* p) {
  v.vecmat(q, Kt, ld, D, n, p);
}

// The AVX2 table's vecmat is the chain ScoreRowsAvx2 reproduces for many rows at once; the
// portable table's (no FMA) is not, so it keeps the per-row form.
bool BlockedScores(const VecOps& v) { return std::strcmp(v.name, "avx2-fma") == 0; }

}  // namespace

void ref::Attention(const AttentionArgs& a) {
  const int64_t group = a.nH / a.nKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  std::vector<double> s(static_cast<size_t>(a.S)), acc(static_cast<size_t>(a.D));
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.nH; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < a.S; ++i) {
        const float* q = a.q + Idx(b, i, a.S, h, a.nH, 0, a.D);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = scale * DotD(q, a.k + Idx(b, j, a.S, kh, a.nKV, 0, a.D), a.D);
          if (s[j] > m) m = s[j];
        }
        double l = 0;
        for (int64_t d = 0; d < a.D; ++d) acc[d] = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double p = std::exp(s[j] - m);
          l += p;
          const float* v = a.v + Idx(b, j, a.S, kh, a.nKV, 0, a.D);
          for (int64_t d = 0; d < a.D; ++d) acc[d] += p * v[d];
        }
        for (int64_t d = 0; d < a.D; ++d) a.o[Idx(b, i, a.S, h, a.nH, d, a.D)] = static_cast<float>(acc[d] / l);
        a.lse[(b * a.nH + h) * a.S + i] = static_cast<float>(m + std::log(l));
      }
    }
  }
}

void fast::Attention(const AttentionArgs& a) {
  const VecOps& v = Vec();
  const int64_t group = a.nH / a.nKV, D = a.D, S = a.S;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  // Kt's padding columns (S .. ld) stay zero: the blocked scores read them. They come kChunk
  // rows at a time (a long sequence's whole score matrix would not stay in cache).
  constexpr int64_t kChunk = 32;
  const int64_t ld = ScoreLd(S);
  const bool blocked = BlockedScores(v);
  const bool rowPairs = blocked && D % 8 == 0;
  std::vector<float> Kt(static_cast<size_t>(ld * D)), V(static_cast<size_t>(S * D)), P(static_cast<size_t>(blocked ? kChunk * ld : ld));
  std::vector<float> L(static_cast<size_t>(kChunk));
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t kh = 0; kh < a.nKV; ++kh) {
      PackHeadT(a.k, b, kh, S, a.nKV, D, ld, Kt.data());
      PackHead(a.v, b, kh, S, S, a.nKV, D, V.data());
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
        if (rowPairs) {
          // A chunk's score rows, then its softmax rows, then o = P V two rows at a time (the
          // same bits as the per-row vecmat below).
          for (int64_t i0 = 0; i0 < S; i0 += kChunk) {
            const int64_t rows = std::min(kChunk, S - i0);
            ScoreRowsAvx2(a.q + Idx(b, i0, S, h, a.nH, 0, D), a.nH * D, Kt.data(), ld, D, i0, rows, P.data());
            for (int64_t r = 0; r < rows; ++r) {
              float* p = P.data() + r * ld;
              const float m = v.max(p, i0 + r + 1) * scale;
              L[r] = v.expsum(p, scale, m, p, i0 + r + 1);
              a.lse[(b * a.nH + h) * S + i0 + r] = m + std::log(L[r]);
            }
            float* o0 = a.o + Idx(b, i0, S, h, a.nH, 0, D);
            CausalRowsAvx2(P.data(), ld, V.data(), D, i0, rows, D, o0, a.nH * D);
            for (int64_t r = 0; r < rows; ++r) v.scale(o0 + r * a.nH * D, 1.0f / L[r], D);
          }
          continue;
        }
        for (int64_t i = 0; i < S; ++i) {
          const float* q = a.q + Idx(b, i, S, h, a.nH, 0, D);
          float* o = a.o + Idx(b, i, S, h, a.nH, 0, D);
          if (blocked && i % kChunk == 0) ScoreRowsAvx2(q, a.nH * D, Kt.data(), ld, D, i, std::min(kChunk, S - i), P.data());
          float* p = blocked ? P.data() + (i % kChunk) * ld : P.data();
          if (!blocked) Scores(v, q, Kt.data(), ld, D, i + 1, p);
          const float m = v.max(p, i + 1) * scale;
          const float l = v.expsum(p, scale, m, p, i + 1);
          v.vecmat(p, V.data(), D, i + 1, D, o);  // o = p^T V
          v.scale(o, 1.0f / l, D);
          a.lse[(b * a.nH + h) * S + i] = m + std::log(l);
        }
      }
    }
  }
}

void ref::AttentionBackward(const AttentionBackwardArgs& a) {
  const int64_t group = a.nH / a.nKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  const size_t nq = static_cast<size_t>(a.B * a.S * a.nH * a.D), nk = static_cast<size_t>(a.B * a.S * a.nKV * a.D);
  std::vector<double> dq(nq, 0.0), dk(nk, 0.0), dv(nk, 0.0);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.nH; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < a.S; ++i) {
        const size_t qi = Idx(b, i, a.S, h, a.nH, 0, a.D);
        const double lse = a.lse[(b * a.nH + h) * a.S + i];
        const double Di = DotD(a.dout + qi, a.o + qi, a.D);
        for (int64_t j = 0; j <= i; ++j) {
          const size_t kj = Idx(b, j, a.S, kh, a.nKV, 0, a.D);
          const double p = std::exp(scale * DotD(a.q + qi, a.k + kj, a.D) - lse);
          const double dp = DotD(a.dout + qi, a.v + kj, a.D);
          const double ds = p * (dp - Di);
          for (int64_t d = 0; d < a.D; ++d) {
            dq[qi + d] += scale * ds * a.k[kj + d];
            dk[kj + d] += scale * ds * a.q[qi + d];
            dv[kj + d] += p * a.dout[qi + d];
          }
        }
      }
    }
  }
  for (size_t i = 0; i < nq; ++i) a.dq[i] = static_cast<float>(dq[i]);
  for (size_t i = 0; i < nk; ++i) a.dk[i] = static_cast<float>(dk[i]);
  for (size_t i = 0; i < nk; ++i) a.dv[i] = static_cast<float>(dv[i]);
}

void fast::AttentionBackward(const AttentionBackwardArgs& a) {
  // Per (sequence, kv head): K, V packed (and transposed for the score-like
  // products); per query head of the group, query rows in tiles of kTile: each row
  // gives its P and dS rows (stored transposed, [j][row]) and dq; then every key j
  // gets dK[j] += dS[:, j]^T Q_tile and dV[j] += P[:, j]^T dO_tile in one pass.
  constexpr int64_t kTile = 32;
  const VecOps& v = Vec();
  const int64_t group = a.nH / a.nKV, D = a.D, S = a.S;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const size_t sd = static_cast<size_t>(S * D);
  // Kt's and Vt's padding columns (S .. ld) stay zero: the blocked scores read them.
  const int64_t ld = ScoreLd(S);
  const bool blocked = BlockedScores(v);
  // With the blocked (AVX2) scores, a tile's P and dS rows are all kept, and the key gradients
  // come from them directly (KeyGradsAvx2); otherwise each row is also scattered into the
  // transposed Pt / dSt for one vecmat per key.
  const bool keyRows = blocked && D % 8 == 0;
  const size_t rowsP = static_cast<size_t>(blocked ? kTile * ld : ld), sdT = static_cast<size_t>(ld * D);
  std::vector<float> K(sd), Kt(sdT), Vt(sdT), dK(sd), dV(sd), P(rowsP), dP(rowsP);
  std::vector<float> Pt(keyRows ? 0 : static_cast<size_t>(S * kTile)), dSt(keyRows ? 0 : static_cast<size_t>(S * kTile));
  std::vector<float> Qt(static_cast<size_t>(kTile * D)), dOt(static_cast<size_t>(kTile * D)), tmp(static_cast<size_t>(D));
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t kh = 0; kh < a.nKV; ++kh) {
      // The next step's rows, while this one computes.
      if (kh + 1 < a.nKV) PrefetchBackwardRows(a, b, kh + 1);
      else if (b + 1 < a.B) PrefetchBackwardRows(a, b + 1, 0);
      PackHead(a.k, b, kh, S, S, a.nKV, D, K.data());
      PackHeadT(a.k, b, kh, S, a.nKV, D, ld, Kt.data());
      PackHeadT(a.v, b, kh, S, a.nKV, D, ld, Vt.data());
      std::fill(dK.begin(), dK.end(), 0.0f);
      std::fill(dV.begin(), dV.end(), 0.0f);
      for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
        for (int64_t i0 = 0; i0 < S; i0 += kTile) {
          const int64_t rows = std::min(kTile, S - i0), i1 = i0 + rows;
          if (blocked) {
            // The tile's score rows (P = Q K^T, dP = dO V^T, before the softmax), kTile at a time.
            ScoreRowsAvx2(a.q + Idx(b, i0, S, h, a.nH, 0, D), a.nH * D, Kt.data(), ld, D, i0, rows, P.data());
            ScoreRowsAvx2(a.dout + Idx(b, i0, S, h, a.nH, 0, D), a.nH * D, Vt.data(), ld, D, i0, rows, dP.data());
          }
          if (!keyRows) {
            std::fill(Pt.begin(), Pt.begin() + i1 * kTile, 0.0f);
            std::fill(dSt.begin(), dSt.begin() + i1 * kTile, 0.0f);
          }
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            const size_t qi = Idx(b, i, S, h, a.nH, 0, D);
            const float* q = a.q + qi;
            const float* dO = a.dout + qi;
            std::memcpy(Qt.data() + r * D, q, static_cast<size_t>(D) * 4);
            std::memcpy(dOt.data() + r * D, dO, static_cast<size_t>(D) * 4);
            const float lse = a.lse[(b * a.nH + h) * S + i];
            const float Di = v.dot(dO, a.o + qi, D);
            float* p = blocked ? P.data() + r * ld : P.data();
            float* dp = blocked ? dP.data() + r * ld : dP.data();
            if (!blocked) {
              Scores(v, q, Kt.data(), ld, D, i + 1, p);
              Scores(v, dO, Vt.data(), ld, D, i + 1, dp);
            }
            v.expsum(p, scale, lse, p, i + 1);
            if (keyRows) {
              for (int64_t j = 0; j <= i; ++j) dp[j] = (dp[j] - Di) * p[j] * scale;
            } else {
              for (int64_t j = 0; j <= i; ++j) {
                const float ds = (dp[j] - Di) * p[j] * scale;
                dp[j] = ds;
                Pt[j * kTile + r] = p[j];
                dSt[j * kTile + r] = ds;
              }
            }
            if (!keyRows) v.vecmat(dp, K.data(), D, i + 1, D, a.dq + qi);  // dq = dS K
          }
          if (keyRows) {
            // dq = dS K two rows at a time; dK += dS^T Q and dV += P^T dO straight from the
            // row-major P / dS rows (the same bits as the per-row and per-key vecmats).
            CausalRowsAvx2(dP.data(), ld, K.data(), D, i0, rows, D, a.dq + Idx(b, i0, S, h, a.nH, 0, D), a.nH * D);
            KeyGradsAvx2(dP.data(), ld, Qt.data(), D, i0, rows, D, dK.data());
            KeyGradsAvx2(P.data(), ld, dOt.data(), D, i0, rows, D, dV.data());
            continue;
          }
          for (int64_t j = 0; j < i1; ++j) {
            float* dk = dK.data() + j * D;
            float* dv = dV.data() + j * D;
            v.vecmat(dSt.data() + j * kTile, Qt.data(), D, rows, D, tmp.data());
            for (int64_t d = 0; d < D; ++d) dk[d] += tmp[d];
            v.vecmat(Pt.data() + j * kTile, dOt.data(), D, rows, D, tmp.data());
            for (int64_t d = 0; d < D; ++d) dv[d] += tmp[d];
          }
        }
      }
      for (int64_t j = 0; j < S; ++j) {
        std::memcpy(a.dk + Idx(b, j, S, kh, a.nKV, 0, D), dK.data() + j * D, static_cast<size_t>(D) * 4);
        std::memcpy(a.dv + Idx(b, j, S, kh, a.nKV, 0, D), dV.data() + j * D, static_cast<size_t>(D) * 4);
      }
    }
  }
}

void ref::AttentionDecode(const AttentionDecodeArgs& a) {
  const int64_t group = a.nH / a.nKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.D));
  std::vector<double> s(static_cast<size_t>(a.Smax)), acc(static_cast<size_t>(a.D));
  for (int64_t b = 0; b < a.B; ++b) {
    const int32_t L = a.lengths[b];
    CheckLength(L, b, a.Smax);
    for (int64_t h = 0; h < a.nH; ++h) {
      const int64_t kh = h / group;
      const float* q = a.q + (b * a.nH + h) * a.D;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < L; ++j) {
        s[j] = scale * DotD(q, a.k + Idx(b, j, a.Smax, kh, a.nKV, 0, a.D), a.D);
        if (s[j] > m) m = s[j];
      }
      double l = 0;
      for (int64_t d = 0; d < a.D; ++d) acc[d] = 0;
      for (int64_t j = 0; j < L; ++j) {
        double p = std::exp(s[j] - m);
        l += p;
        const float* v = a.v + Idx(b, j, a.Smax, kh, a.nKV, 0, a.D);
        for (int64_t d = 0; d < a.D; ++d) acc[d] += p * v[d];
      }
      for (int64_t d = 0; d < a.D; ++d) a.o[(b * a.nH + h) * a.D + d] = L == 0 ? 0.0f : static_cast<float>(acc[d] / l);
    }
  }
}

void fast::AttentionDecode(const AttentionDecodeArgs& a) {
  const VecOps& v = Vec();
  const int64_t group = a.nH / a.nKV, D = a.D;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  std::vector<float> p(static_cast<size_t>(a.Smax));
  for (int64_t b = 0; b < a.B; ++b) CheckLength(a.lengths[b], b, a.Smax);
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t L = a.lengths[b];
    for (int64_t h = 0; h < a.nH; ++h) {
      const int64_t kh = h / group;
      const float* q = a.q + (b * a.nH + h) * D;
      float* o = a.o + (b * a.nH + h) * D;
      std::memset(o, 0, static_cast<size_t>(D) * 4);
      if (L == 0) continue;
      for (int64_t j = 0; j < L; ++j) p[j] = v.dot(q, a.k + Idx(b, j, a.Smax, kh, a.nKV, 0, D), D);
      const float m = v.max(p.data(), L) * scale;
      const float l = v.expsum(p.data(), scale, m, p.data(), L);
      // o = p^T V straight from the cache (rows a stride of nKV * D apart).
      v.vecmat(p.data(), a.v + Idx(b, 0, a.Smax, kh, a.nKV, 0, D), a.nKV * D, L, D, o);
      v.scale(o, 1.0f / l, D);
    }
  }
}

}  // namespace ascent::model
