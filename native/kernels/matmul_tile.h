// What the AVX-512 matmul tiles share: the lane masks of a partial column tile and the store
// epilogue. The fp32 tile (matmul_avx512.cc) and the bf16 tile (matmul_bf16.cc) both end in MR x 32
// fp32 accumulators stored into C's rows, masked on the last column tile (no scalar tail, no
// staging tile), overwriting C on the first k slice and adding to it on later ones.
//
// The tiles are compiled for different targets (avx512f; avx512f + bw + bf16), so these are
// static inline functions that need only avx512f: each is inlined into its caller and built
// for the caller's target (a superset), and no copy is ever called across targets.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ascent::fast {

// The mask of the first `n` of 16 lanes (none when n <= 0).
static inline __mmask16 Lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The mask of the first `n` of 32 lanes (none when n <= 0).
static inline __mmask32 Lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// Rows i < MR of the tile (acc0 and acc1 hold MR registers each; the call is always inlined, so
// they stay registers): c[i * ldc + j] (=|+=) acc0[i][j] for j < 16 and acc1[i][j - 16] for
// 16 <= j < 32, only in the columns the masks m0 | m1 << 16 select (others are neither read nor
// written: they may lie past the end of C).
template <int MR>
__attribute__((target("avx512f"), always_inline)) static inline void StoreTile(__m512* acc0, __m512* acc1, float* c, int64_t ldc,
                                                                               bool accumulate, __mmask16 m0, __mmask16 m1) {
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc0[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), acc0[i]);
      acc1[i] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), acc1[i]);
    }
    _mm512_mask_storeu_ps(ci, m0, acc0[i]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc1[i]);
  }
}

}  // namespace ascent::fast
