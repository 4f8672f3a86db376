// The AVX-512 fp32 matmul for the shapes the training step runs (matmul_avx512.cc):
// A is read in place, B is packed only when it must be (transposed or too big for L2).
#pragma once

#include <cstdint>

namespace ascent::fast {

// c (row stride n) = op(a) . op(b), one batch entry, fp32 in and out. Needs avx512f (the caller checks).
void MatmulF32Avx512(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b);

}  // namespace ascent::fast
