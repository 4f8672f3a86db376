// The AVX2+FMA fp32 matmul at every shape (matmul_avx2.cc): A is read in place below 512 on some
// dim (packed from there), B is packed only when it must be (transposed, or too big for L2). The AVX-512 path's design
// (matmul_avx512.cc) on 256-bit registers, for CPUs without AVX-512.
#pragma once

#include <cstdint>

namespace ascent::fast {

// c (row stride n) = op(a) . op(b), one batch entry, fp32 in and out. Needs avx2 and fma (the caller checks).
void MatmulF32Avx2(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b);

}  // namespace ascent::fast
