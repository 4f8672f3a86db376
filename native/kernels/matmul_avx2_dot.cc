// C = A . B^T for few rows of A, without packing B (the "dot-product" form).
//
// Why: a linear layer y = x . W^T (W stored [out, in]) with few rows (the engine's decode,
// M = 1..16 per rank) spent as long packing W in matmul_avx2.cc (N * K floats through 8 x 8
// transposes, repeated every call) as multiplying. Here a tile is MR rows of A times NB rows of B:
// both are contiguous along k, so each is read straight from memory, 8 k at a time, into MR x NB
// vector accumulators; one horizontal reduction per tile at the end turns each accumulator into
// one element of C. The k tail (k % 8) loads through a lane mask (masked lanes read nothing and
// hold zero), so nothing past A's or B's end is touched and no k is padded.
//
// Summation order (fixed, whatever m, n or the tile): lane l sums the products p = l (mod 8) in
// order of p; the 8 lane sums are added as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
//
// Rows are split into equal tiles (16 rows = 4 tiles of 3 and 2 of 2), so no row is padded;
// the last column tile of a row tile has fewer B rows (NB 1..max) and a masked store.
// B is walked in column blocks that fit in L2, each read once per row tile from there.
#include "kernels/matmul_avx2_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

namespace ascent::fast {
namespace {

// Widest tile per row count: MR x NB accumulators plus the NB (or MR) loads in 16 ymm registers.
constexpr int kMaxMR = 3;
constexpr int kMaxNB = 8;
constexpr int NbFor(int mr) { return mr == 1 ? 8 : mr == 2 ? 6 : 4; }
// B rows per column block: the block (cols x k floats) stays within ~192 KiB of a 512 KiB L2.
constexpr int64_t kBlockFloats = 48 * 1024;

__attribute__((target("avx2"), always_inline)) inline __m256i Lanes8(int64_t n) {
  const int32_t c = static_cast<int32_t>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The four lane sums of r0..r3, in the fixed tree above: {sum r0, sum r1, sum r2, sum r3}.
__attribute__((target("avx2"), always_inline)) inline __m128 Sum4(__m256 r0, __m256 r1, __m256 r2, __m256 r3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(r0, r1), _mm256_hadd_ps(r2, r3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

using DotFn = void (*)(int64_t k, const float* a, const float* b, float* c, int64_t ldc, int64_t tiles);

// c[i * ldc + j] = sum_p a[i * k + p] * b[j * k + p] for i < MR, j < NB * tiles: `tiles`
// column tiles of NB in one call (a call per tile was 5-8% slower at k = 128, m = 16).
template <int MR, int NB>
__attribute__((target("avx2,fma"))) void Dot(int64_t k, const float* a, const float* b, float* c, int64_t ldc, int64_t tiles) {
  for (int64_t t = 0; t < tiles; ++t, b += NB * k, c += NB) {
    __m256 acc[MR][NB];
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
    }
    int64_t p = 0;
#pragma GCC unroll 2
    for (; p + 8 <= k; p += 8) {
      // A's MR vectors stay in registers and each B vector is loaded once for MR FMAs: MR x NB
      // accumulators + MR + 1 <= 16 ymm (holding all NB B vectors instead spilled accumulators).
      __m256 av[MR];
#pragma GCC unroll 3
      for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_ps(a + i * k + p);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        const __m256 bv = _mm256_loadu_ps(b + j * k + p);
#pragma GCC unroll 3
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
      }
    }
    if (p < k) {
      const __m256i m = Lanes8(k - p);
#pragma GCC unroll 3
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_maskload_ps(a + i * k + p, m);
#pragma GCC unroll 8
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(av, _mm256_maskload_ps(b + j * k + p, m), acc[i][j]);
      }
    }
    const __m256 z = _mm256_setzero_ps();
#pragma GCC unroll 3
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < NB; j += 4) {
        const __m128 s = Sum4(acc[i][j], j + 1 < NB ? acc[i][j + 1] : z, j + 2 < NB ? acc[i][j + 2] : z,
                              j + 3 < NB ? acc[i][j + 3] : z);
        float* ci = c + i * ldc + j;
        if (j + 4 <= NB) {
          _mm_storeu_ps(ci, s);
        } else {
          _mm_maskstore_ps(ci, _mm256_castsi256_si128(Lanes8(NB - j)), s);
        }
      }
    }
  }
}

template <int MR, size_t... J>
constexpr std::array<DotFn, kMaxNB + 1> Row(std::index_sequence<J...>) {
  return {(J == 0 || static_cast<int>(J) > NbFor(MR) ? nullptr : &Dot<MR, static_cast<int>(J)>)...};
}
// kDots[mr][nb], mr in 1..kMaxMR, nb in 1..NbFor(mr).
const std::array<DotFn, kMaxNB + 1> kDots[kMaxMR + 1] = {{}, Row<1>(std::make_index_sequence<kMaxNB + 1>{}),
                                                         Row<2>(std::make_index_sequence<kMaxNB + 1>{}),
                                                         Row<3>(std::make_index_sequence<kMaxNB + 1>{})};

}  // namespace

void MatmulF32DotAvx2(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k) {
  const int64_t n_tiles = (m + kMaxMR - 1) / kMaxMR, base = m / n_tiles, extra = m % n_tiles;
  const int64_t block = std::max<int64_t>(kMaxNB, kBlockFloats / k / kMaxNB * kMaxNB);
  for (int64_t jc = 0; jc < n; jc += block) {
    const int64_t nc = std::min(block, n - jc);
    int64_t row = 0;
    for (int64_t t = 0; t < n_tiles; ++t) {
      const int mr = static_cast<int>(base + (t < extra ? 1 : 0));
      const int64_t nb = NbFor(mr);
      const auto& fns = kDots[mr];
      const float* ar = a + row * k;
      float* cr = c + row * n;
      const int64_t full = nc / nb, rest = nc - full * nb;
      if (full > 0) fns[nb](k, ar, b + jc * k, cr + jc, n, full);
      if (rest > 0) fns[rest](k, ar, b + (jc + full * nb) * k, cr + jc + full * nb, n, 1);
      row += mr;
    }
  }
}

}  // namespace ascent::fast
