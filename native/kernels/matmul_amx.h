// The AMX bf16 matmul (matmul_amx.cc): bf16 inputs, fp32 accumulation in AMX tiles.
#pragma once

#include <cstdint>

namespace ascent::fast {

// Null when this process may run AMX-BF16 tiles, else why not (the CPU lacks AMX-BF16 or
// AMX-TILE, the OS does not enable the tile state, or it refused this process the permission).
// Checked once per process: the permission it asks for is process-wide, so it covers every
// stream thread.
const char* AmxUnusableReason();

// c (fp32, row stride n) = op(a) . op(b), one batch entry, a and b bf16 bits; same contract as
// MatmulBf16Avx512 (matmul_bf16.h). Needs AmxUnusableReason() == nullptr (the caller checks).
void MatmulBf16Amx(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a,
                   bool trans_b);

}  // namespace ascent::fast
