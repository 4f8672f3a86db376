// Reduction kernel shared by every reducing algorithm: out = op(in[0], ..., in[n-1])
// elementwise, folded in input order (rank order), so every rank that reduces the
// same range computes bit-identical results. Floats accumulate in fp32 (bf16/fp16
// are widened once and rounded once at the end); integers wrap like C unsigned
// arithmetic; avg divides the sum by `divisor` (integers truncate toward zero).
// `out` may alias an input at the same offsets (in place): every element is read
// from every input before it is stored (not an input at another offset).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/descriptor.h"
#include "kernels/dtype.h"

namespace ascent {
namespace comm {

void Reduce(uint8_t* out, const uint8_t* const* in, int n, uint64_t count, DType dtype, RedOp op, int divisor);

// The same reduction stored into every one of `outs` (each may alias an input at
// the same offset: a block is read from every input before it is stored anywhere).
// `streaming`: non-temporal stores (large outputs nobody reads back soon), except into
// an output that is also one of the inputs (in place): its lines were just read and
// are still in cache, where plain stores are cheaper.
void ReduceToMany(uint8_t* const* outs, int nouts, bool streaming, const uint8_t* const* in, int n, uint64_t count,
                  DType dtype, RedOp op, int divisor);

}  // namespace comm
}  // namespace ascent
