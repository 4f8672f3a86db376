// Σ x² over a list of fp32 tensors (the squared gradient norm for clipping) as one op.
// Each tensor's sum is the matmul kernel's own 1x1 product x·xᵀ (the op this replaces ran
// exactly that matmul per tensor, then fp32 adds): calling the same kernel keeps the
// summation order, and so the bits, whatever blocking the matmul kernel uses.
#include "kernels/fast.h"
#include "kernels/model/model_kernels.h"
#include "kernels/reference.h"

namespace ascent::model {
namespace {

template <void (*Matmul)(const MatmulArgs&)>
void Run(const SumSquaresArgs& a) {
  float acc = 0.0f;
  bool first = true;
  for (const auto& [x, n] : a.list) {
    float s = 0.0f;
    Matmul(MatmulArgs{DType::kF32, DType::kF32, x, x, &s, 1, 1, 1, n, false, true});
    // The first partial sum is taken as it is (not 0 + s, which would turn -0 into +0).
    acc = first ? s : acc + s;
    first = false;
  }
  *a.out = acc;
}

}  // namespace

void ref::SumSquares(const SumSquaresArgs& a) { Run<ascent::ref::Matmul>(a); }
void fast::SumSquares(const SumSquaresArgs& a) { Run<ascent::fast::Matmul>(a); }

}  // namespace ascent::model
