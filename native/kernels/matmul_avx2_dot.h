// The AVX2+FMA fp32 matmul in dot-product form, for op(B) = B^T with few rows of A: C = A . B^T
// with B read in place (no packing). See matmul_avx2_dot.cc.
#pragma once

#include <cstdint>

namespace ascent::fast {

// c[i * n + j] = sum_p a[i * k + p] * b[j * k + p] for i < m, j < n (a row-major [m, k], b
// row-major [n, k], c overwritten). Each element sums its k products in one fixed order that
// depends on k only (not on m, n or the tiling), so a shape gives the same bits on every run.
// Needs avx2 and fma (the caller checks); k >= 1.
void MatmulF32DotAvx2(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k);

}  // namespace ascent::fast
