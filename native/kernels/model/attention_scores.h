// The causal products of one attention head, many query rows (or keys) at a time (AVX2+FMA):
// the score rows, o = P V / dq = dS K, and the backward's dK / dV.
//
// Why: the per-row form (vec.h vecmat of one query against keys 0..i) runs one row per pass over
// K and ends each row in a scalar tail of up to 7 columns; at the trainer's sequence lengths
// (tens of keys) the tails and the per-call overhead were most of the attention kernels' time.
// Here a tile of rows shares each load of K. The vecmat forms of P V, dS K and the per-key dK / dV
// were one FMA chain per output vector after another, each waiting on its own latency; pairing
// two rows (or keys) runs two independent chains per load and keeps every chain's order, so the
// results are the same bits.
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

// The backward's key-side products of one tile of query rows first .. first + n - 1, for keys
// j < first + n: out[j * D + d] += sum over the rows r that see key j (first + r >= j), in
// order, of coef[r * ldc + j] * x[r * ldx + d]. (dK from dS and Q, dV from P and dO.) Each sum is
// one FMA chain from +0 over those rows, added to out afterwards: the bits of VecOps::vecmat
// over a transposed, zero-filled copy of coef's columns followed by that add (finite inputs:
// the copy's zeros times an inf would give NaN), as the per-key form computed it. Keys are taken
// two at a time and every row's x is loaded once per pair, so the chains run side by side
// instead of one key's chain after another. D % 8 == 0.
// Reads coef[r * ldc + j] only where first + r >= j.
void KeyGradsAvx2(const float* coef, int64_t ldc, const float* x, int64_t ldx, int64_t first, int64_t n, int64_t D, float* out);

// Query rows first .. first + n - 1 times the keys they see: out[r * ldo + d] = sum over
// j <= first + r, in order, of coef[r * ldc + j] * m[j * ldm + d] (o = P V, dq = dS K). Each
// value is one FMA chain from +0, stored: the bits of VecOps::vecmat (AVX2) of row r against the
// first first + r + 1 rows of m. Rows go two at a time, sharing each load of m. D % 8 == 0.
void CausalRowsAvx2(const float* coef, int64_t ldc, const float* m, int64_t ldm, int64_t first, int64_t n, int64_t D, float* out,
                    int64_t ldo);

}  // namespace ascent::model
