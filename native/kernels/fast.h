// Fast kernels: same contracts as reference.h. Elementwise kernels are typed,
// vectorisable loops (bitwise equal to the reference); matmul is cache-blocked, with a
// micro-kernel chosen at run time (AVX-512, AMX bf16 tiles, AVX-512 bf16 pairs, AVX2+FMA, portable): fp32 on
// AVX-512 or AVX2 reads A in place and packs B only when it must (matmul_avx512.cc,
// matmul_avx2.cc; below 512 on some dim for both), the rest packs.
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

// Matmul micro-kernel choice (matmul.cc): auto picks the best the CPU has; a forced mode the
// CPU lacks falls back to the best it has below it (test hook). kAmx differs from kAuto only in
// name; kAvx512 keeps bf16 inputs on vdpbf16ps even where AMX is usable.
enum class MatmulKernelMode { kAuto = 0, kPortable = 1, kAvx2 = 2, kAvx512 = 3, kAmx = 4 };
void SetMatmulKernelMode(MatmulKernelMode mode);
// "avx512", "avx2-fma" or "portable": the fp32 micro-kernel Matmul uses now.
const char* MatmulKernelName();
// "amx-bf16" (AMX tiles), "avx512-bf16" (vdpbf16ps) or the fp32 kernel's name: what bf16 inputs use now.
const char* MatmulBf16KernelName();
// Whether the model kernels' vector primitives (kernels/model/vec.h) may use AVX2+FMA: the CPU
// has them and the test hook does not force the portable path. Asked of the CPU, not of the
// matmul kernel's name: an AVX-512 CPU has AVX2 too.
bool VectorAvx2Allowed();
// Whether elementwise kernels may use AVX-512 F+BW: the CPU has them and the test hook forces
// neither the portable nor the AVX2 path.
bool VectorAvx512BwAllowed();

}  // namespace ascent::fast
