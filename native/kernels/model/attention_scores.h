// The causal score rows of one attention head, many query rows at a time (AVX2+FMA).
//
// Why: the per-row form (vec.h vecmat of one query against keys 0..i) runs one row per pass over
// K and ends each row in a scalar tail of up to 7 columns; at the trainer's sequence lengths
// (tens of keys) the tails and the per-call overhead were most of the attention kernels' time.
// Here a tile of rows shares each load of K.
#pragma once

#include <cstdint>

namespace ascent::model {

// The leading dimension ScoreRowsAvx2 wants for Kt and s: n rounded up to whole 8-float vectors.
inline int64_t ScoreLd(int64_t n) { return (n + 7) / 8 * 8; }

// Score rows i in [first, first + n) of one head: s[(i - first) * ld + j] = sum over d < D of
// q[(i - first) * ldq + d] * Kt[d * ld + j] for keys j <= i (the 8-float block holding j = i is
// written whole; columns past it are not written). q points at row `first`. Each value is one
// fused multiply-add chain over d in order, starting from +0: the bits of VecOps::vecmat (AVX2)
// of row i against the first i + 1 columns of Kt. Kt's columns up to ld must be readable
// (finite; their results land only in columns past i).
void ScoreRowsAvx2(const float* q, int64_t ldq, const float* Kt, int64_t ld, int64_t D, int64_t first, int64_t n, float* s);

}  // namespace ascent::model
