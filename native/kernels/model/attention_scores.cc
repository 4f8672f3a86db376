// See attention_scores.h. A tile is kRows query rows x 16 keys (two ymm per row, 2 * kRows
// accumulators): for each d one broadcast of q per row and two loads of Kt serve 2 * kRows FMAs.
#include "kernels/model/attention_scores.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

namespace ascent::model {
namespace {

constexpr int kRows = 4;

// R rows from q (ldq apart) into s (ld apart), key blocks [j0, j0 + 8 * W):
// acc = fma(q[r][d], Kt[d][j], acc) for d in order.
template <int R, int W>
__attribute__((target("avx2,fma"))) void Tile(const float* q, int64_t ldq, const float* Kt, int64_t ld, int64_t D, int64_t j0,
                                              float* s) {
  __m256 acc[R][W];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) acc[r][w] = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < D; ++d) {
    __m256 k[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) k[w] = _mm256_loadu_ps(Kt + d * ld + j0 + 8 * w);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(q + r * ldq + d);
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(x, k[w], acc[r][w]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) _mm256_storeu_ps(s + r * ld + j0 + 8 * w, acc[r][w]);
  }
}

// Rows i .. i + R - 1 (q and s at row i): key blocks through the one holding the last row's
// key i + R - 1; earlier rows get a few columns past their own i, which nothing reads.
template <int R>
void Rows(const float* q, int64_t ldq, const float* Kt, int64_t ld, int64_t D, int64_t i, float* s) {
  const int64_t blocks = (i + R - 1) / 8 + 1;
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) Tile<R, 2>(q, ldq, Kt, ld, D, 8 * b, s);
  if (b < blocks) Tile<R, 1>(q, ldq, Kt, ld, D, 8 * b, s);
}

// KeyGradsAvx2 for keys j (and j + 1 when kPair) over columns [c, c + 8 NV).
template <int NV, bool kPair>
__attribute__((target("avx2,fma"))) void KeyCols(const float* coef, int64_t ldc, const float* x, int64_t ldx, int64_t first,
                                                 int64_t n, int64_t j, int64_t c, int64_t D, float* out) {
  __m256 a0[NV], a1[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) a0[v] = a1[v] = _mm256_setzero_ps();
  int64_t r = std::max<int64_t>(0, j - first);
  if (kPair && first + r == j) {
    // Key j + 1 is not seen by this row: its chain would add +0 * x to +0 here.
    const __m256 b0 = _mm256_broadcast_ss(coef + r * ldc + j);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) a0[v] = _mm256_fmadd_ps(b0, _mm256_loadu_ps(x + r * ldx + c + 8 * v), a0[v]);
    ++r;
  }
  for (; r < n; ++r) {
    const float* xr = x + r * ldx + c;
    const __m256 b0 = _mm256_broadcast_ss(coef + r * ldc + j);
    const __m256 b1 = kPair ? _mm256_broadcast_ss(coef + r * ldc + j + 1) : b0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m256 xv = _mm256_loadu_ps(xr + 8 * v);
      a0[v] = _mm256_fmadd_ps(b0, xv, a0[v]);
      if (kPair) a1[v] = _mm256_fmadd_ps(b1, xv, a1[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    float* o0 = out + j * D + c + 8 * v;
    _mm256_storeu_ps(o0, _mm256_add_ps(_mm256_loadu_ps(o0), a0[v]));
    if (kPair) _mm256_storeu_ps(o0 + D, _mm256_add_ps(_mm256_loadu_ps(o0 + D), a1[v]));
  }
}

// Calls cols(std::integral_constant<int, NV>, c) over the columns [0, D) (D % 8 == 0): blocks of
// 32 (NV = 4), then one block of the 8, 16 or 24 left.
template <class F>
void ColumnBlocks(int64_t D, F&& cols) {
  int64_t c = 0;
  for (; c + 32 <= D; c += 32) cols(std::integral_constant<int, 4>{}, c);
  switch ((D - c) / 8) {
    case 3: cols(std::integral_constant<int, 3>{}, c); break;
    case 2: cols(std::integral_constant<int, 2>{}, c); break;
    case 1: cols(std::integral_constant<int, 1>{}, c); break;
    default: break;
  }
}

template <bool kPair>
void KeyColsAll(const float* coef, int64_t ldc, const float* x, int64_t ldx, int64_t first, int64_t n, int64_t j, int64_t D,
                float* out) {
  ColumnBlocks(D, [&](auto nv, int64_t c) { KeyCols<decltype(nv)::value, kPair>(coef, ldc, x, ldx, first, n, j, c, D, out); });
}

// CausalRowsAvx2 for rows r (and r + 1 when kPair) over columns [c, c + 8 NV).
template <int NV, bool kPair>
__attribute__((target("avx2,fma"))) void RowCols(const float* coef, int64_t ldc, const float* m, int64_t ldm, int64_t first,
                                                 int64_t r, int64_t c, float* out, int64_t ldo) {
  __m256 a0[NV], a1[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) a0[v] = a1[v] = _mm256_setzero_ps();
  const float* c0 = coef + r * ldc;
  const float* c1 = c0 + ldc;
  const int64_t last = first + r;  // row r's last key; row r + 1 also sees last + 1
  for (int64_t j = 0; j <= last; ++j) {
    const float* mj = m + j * ldm + c;
    const __m256 b0 = _mm256_broadcast_ss(c0 + j);
    const __m256 b1 = kPair ? _mm256_broadcast_ss(c1 + j) : b0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m256 mv = _mm256_loadu_ps(mj + 8 * v);
      a0[v] = _mm256_fmadd_ps(b0, mv, a0[v]);
      if (kPair) a1[v] = _mm256_fmadd_ps(b1, mv, a1[v]);
    }
  }
  if (kPair) {
    const __m256 b1 = _mm256_broadcast_ss(c1 + last + 1);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) a1[v] = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m + (last + 1) * ldm + c + 8 * v), a1[v]);
  }
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    _mm256_storeu_ps(out + r * ldo + c + 8 * v, a0[v]);
    if (kPair) _mm256_storeu_ps(out + (r + 1) * ldo + c + 8 * v, a1[v]);
  }
}

template <bool kPair>
void RowColsAll(const float* coef, int64_t ldc, const float* m, int64_t ldm, int64_t first, int64_t r, int64_t D, float* out,
                int64_t ldo) {
  ColumnBlocks(D, [&](auto nv, int64_t c) { RowCols<decltype(nv)::value, kPair>(coef, ldc, m, ldm, first, r, c, out, ldo); });
}

}  // namespace

void CausalRowsAvx2(const float* coef, int64_t ldc, const float* m, int64_t ldm, int64_t first, int64_t n, int64_t D, float* out,
                    int64_t ldo) {
  int64_t r = 0;
  for (; r + 2 <= n; r += 2) RowColsAll<true>(coef, ldc, m, ldm, first, r, D, out, ldo);
  if (r < n) RowColsAll<false>(coef, ldc, m, ldm, first, r, D, out, ldo);
}

void KeyGradsAvx2(const float* coef, int64_t ldc, const float* x, int64_t ldx, int64_t first, int64_t n, int64_t D, float* out) {
  const int64_t keys = first + n;
  int64_t j = 0;
  for (; j + 2 <= keys; j += 2) KeyColsAll<true>(coef, ldc, x, ldx, first, n, j, D, out);
  if (j < keys) KeyColsAll<false>(coef, ldc, x, ldx, first, n, j, D, out);
}

void ScoreRowsAvx2(const float* q, int64_t ldq, const float* Kt, int64_t ld, int64_t D, int64_t first, int64_t n, float* s) {
  int64_t r = 0;
  for (; r + kRows <= n; r += kRows) Rows<kRows>(q + r * ldq, ldq, Kt, ld, D, first + r, s + r * ld);
  const float* qr = q + r * ldq;
  float* sr = s + r * ld;
  switch (n - r) {
    case 3: Rows<3>(qr, ldq, Kt, ld, D, first + r, sr); break;
    case 2: Rows<2>(qr, ldq, Kt, ld, D, first + r, sr); break;
    case 1: Rows<1>(qr, ldq, Kt, ld, D, first + r, sr); break;
    default: break;
  }
}

}  // namespace ascent::model
