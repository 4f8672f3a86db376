// Fast kernels: same contracts as reference.h. Elementwise kernels are typed,
// vectorisable loops (bitwise equal to the reference); matmul is cache-blocked and
// packed, with an AVX2+FMA micro-kernel chosen at run time and a portable fallback.
#pragma once

#include <cstddef>

#include "kernels/kernel_args.h"

namespace ascent::fast {

void Fill(void* dst, DType t, size_t n, double value);
void Arange(void* dst, DType t, size_t n, double start, double step);
void Cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n);
void Binary(BinaryOp op, DType t, void* out, const void* a, const void* b, size_t n);
// out = alpha * x; float dtypes only, computed in fp32.
void Scale(DType t, void* out, const void* x, size_t n, float alpha);
// y = y + alpha * x; float dtypes only, computed in fp32.
void Axpy(DType t, void* y, const void* x, size_t n, float alpha);
void Permute(const PermuteArgs& args);
void Matmul(const MatmulArgs& args);

// Test hook: force the portable matmul micro-kernel even when AVX2+FMA is available.
void SetForcePortable(bool force);
// "avx2-fma" or "portable": the micro-kernel Matmul uses now.
const char* MatmulKernelName();

}  // namespace ascent::fast
