// The 16 x 16 register transpose both AVX-512 matmuls pack a transposed B with (fp32 values in
// matmul_avx512.cc, bf16 pairs as 32-bit words in matmul_bf16.cc): a scalar transpose there cost
// a third of a forward A.B^T at 100 tokens.
#pragma once

#include <immintrin.h>

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

}  // namespace ascent::fast
