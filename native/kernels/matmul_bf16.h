// The AVX-512 BF16 matmul (matmul_bf16.cc): bf16 inputs, fp32 accumulation with vdpbf16ps.
#pragma once

#include <cstdint>

namespace ascent::fast {

// c (fp32, row stride n) = op(a) . op(b), one batch entry, a and b bf16 bits.
// Needs avx512f, avx512bw and avx512bf16 (the caller checks).
void MatmulBf16Avx512(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a,
                      bool trans_b);

}  // namespace ascent::fast
