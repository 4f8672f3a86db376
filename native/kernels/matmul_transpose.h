// The 16 x 16 register transpose the AVX-512 and AMX matmuls pack with (fp32 values in
// matmul_avx512.cc, bf16 pairs as 32-bit words in matmul_bf16.cc and matmul_amx.cc): a scalar
// transpose there cost a third of a forward A.B^T at 100 tokens.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ascent::fast {

// r[q][j] <- r[j][q]: the 16 x 16 transpose in four rounds of shuffles (pairs of rows, then
// quads within 128-bit lanes, then lanes across registers twice).
// (GCC 12 flags the undefined pass-through vector inside its own unpack intrinsics.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int base = 0; base < 16; base += 8) {
    for (int c = 0; c < 4; ++c) {
      t[base + c] = _mm512_shuffle_f32x4(r[base + c], r[base + c + 4], 0x88);
      t[base + c + 4] = _mm512_shuffle_f32x4(r[base + c], r[base + c + 4], 0xDD);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
  }
}
#pragma GCC diagnostic pop

// Interleaves 32 bf16 of `lo` (k even) and `hi` (k odd) into 32 (k, k + 1) words: out0 the
// first 16, out1 the rest (both bf16 matmuls pack pairs with it).
__attribute__((target("avx512f,avx512bw"))) inline void InterleavePairs(__m512i lo, __m512i hi, __m512i& out0, __m512i& out1) {
  alignas(64) static const uint16_t kIdx[2][32] = {
      {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
      {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
  out0 = _mm512_permutex2var_epi16(lo, _mm512_load_si512(kIdx[0]), hi);
  out1 = _mm512_permutex2var_epi16(lo, _mm512_load_si512(kIdx[1]), hi);
}

}  // namespace ascent::fast
