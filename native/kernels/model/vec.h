// The few row primitives the fast model kernels are written against (NCCL habit:
// each algorithm once, over a small table of primitives). Two tables: AVX2+FMA
// intrinsics (exp by Cephes range reduction + degree-5 polynomial, ~2 ulp) and a
// portable one (plain loops, std::exp). Vec() picks AVX2 when the CPU has it and
// the process-wide matmul test hook (setMatmulKernel('portable')) does not force
// the portable path, so one hook exercises both paths of every fast kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"

namespace ascent::model {

struct VecOps {
  const char* name;
  // sum_i a[i] * b[i]
  float (*dot)(const float* a, const float* b, int64_t n);
  // y[i] += alpha * x[i]
  void (*axpy)(float* y, float alpha, const float* x, int64_t n);
  // max_i x[i] (-inf when n == 0)
  float (*max)(const float* x, int64_t n);
  // out[i] = exp(scale * x[i] - shift) (out may be null); returns the sum of them.
  float (*expsum)(const float* x, float scale, float shift, float* out, int64_t n);
  // x[i] *= alpha
  void (*scale)(float* x, float alpha, int64_t n);
  // out[c] = sum_r coef[r] * m[r * ld + c] for c < cols (row vector times matrix;
  // accumulates in registers, one pass over m).
  void (*vecmat)(const float* coef, const float* m, int64_t ld, int64_t rows, int64_t cols, float* out);
};

const VecOps& Vec();

// A data-dependent failure found while a kernel runs: becomes the stream's sticky
// StreamError (the stream prefixes the op name and seq).
[[noreturn]] void KernelError(std::string message, std::vector<Detail> details = {});

}  // namespace ascent::model
