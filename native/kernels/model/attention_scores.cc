// See attention_scores.h. A tile is kRows query rows x 16 keys (two ymm per row, 2 * kRows
// accumulators): for each d one broadcast of q per row and two loads of Kt serve 2 * kRows FMAs.
#include "kernels/model/attention_scores.h"

#include <immintrin.h>

#include <algorithm>

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

}  // namespace

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
