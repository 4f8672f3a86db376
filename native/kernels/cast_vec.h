// fp32 <-> bf16 casts with AVX-512 BW or AVX2 integer lanes, bit-equal to the scalar
// F32ToBF16 / BF16ToF32 of dtype.h (cast_vec.cc).
#pragma once

#include <cstddef>

#include "kernels/dtype.h"

namespace ascent::fast {

// Casts n elements when the pair is fp32 -> bf16 or bf16 -> fp32 and the CPU (and the kernel
// mode test hook) allows AVX-512 BW or AVX2; returns false, having written nothing, otherwise.
bool CastVectorized(void* dst, DType dst_t, const void* src, DType src_t, size_t n);

}  // namespace ascent::fast
