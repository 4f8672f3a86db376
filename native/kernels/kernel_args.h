// Argument blocks shared by the reference and fast kernels. Pointers are already
// bounds-checked by the enqueue layer; kernels never validate.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.h"

namespace ascent {

enum class BinaryOp : int { kAdd = 0, kMul = 1 };

// C[b] = op(A[b]) . op(B[b]) for b < batch, all row-major and contiguous.
// A[b] is m x k (k x m when trans_a), B[b] is k x n (n x k when trans_b), C[b] is m x n.
// Inputs share in_dtype (fp32 or bf16); accumulation is fp32; out_dtype is fp32 or bf16.
struct MatmulArgs {
  DType in_dtype;
  DType out_dtype;
  const void* a;
  const void* b;
  void* c;
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
};

// dst (contiguous, shape) <- src element at sum(index[d] * src_strides[d]); strides in
// elements, non-negative.
struct PermuteArgs {
  size_t elem_size;
  void* dst;
  const void* src;
  std::vector<int64_t> shape;
  std::vector<int64_t> src_strides;
};

}  // namespace ascent
