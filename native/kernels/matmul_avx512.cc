// The AVX-512 fp32 matmul, built for the training step's shapes: tokens (100..1000) x
// 64..768 x 64..768, in the three forms a linear layer runs (A.B^T forward, A.B and A^T.B
// backward).
//
// Why not the packed path of matmul.cc: at these sizes copying operands costs as much as the
// FMAs they feed (packing A is ~1 cycle per element, against 2N/64 cycles of FMAs per element;
// at N = 64 that is a third of the time). So:
//  - A is never copied: a tile's MR rows are broadcast straight from op(A), row-major or
//    transposed (a transposed A is even friendlier: one k is MR consecutive floats);
//  - B is read in place when op(B) = B and its kc x N block fits in L2; it is packed into
//    32-wide slivers only when it is transposed (a k step needs 32 consecutive columns) or too
//    big to stay in L2;
//  - a tile is MR x 32 with MR in 1..12, and each row block is split into equal tiles (64 rows
//    = 4 tiles of 11 and 2 of 10), so no row is padded; the last column tile masks its loads
//    and stores (AVX-512 masks), so there is no scalar tail and no staging tile.
// The first kc slice stores into C and later ones accumulate (C's old contents never matter).
// Packed B lives in thread_local scratch grown on demand: nothing is allocated per call in the
// steady state, and all work stays on the calling thread (the stream's).
#include "kernels/matmul_avx512.h"
#include "kernels/scratch.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <new>
#include <utility>

#include "kernels/matmul_tile.h"
#include "kernels/matmul_transpose.h"

namespace ascent::fast {
namespace {

// kc x 32 B sliver (32 KiB) in L1; kc x nc packed B panel in L2; kMC rows of A per block.
constexpr int64_t kNR = 32, kMaxMR = 12, kKC = 256, kNC = 1024, kMC = 144;
// B is read in place while its kc x N block is at most this many floats (256 KiB: half of L2).
constexpr int64_t kDirectB = 64 * 1024;

using TileFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                        bool accumulate, __mmask16 m0, __mmask16 m1);

// c[i][j] (=|+=) sum_p op(A)(i, p) * b[p * ldb + j] for i < MR and the columns masks m0 | m1 << 16 select.
// op(A)(i, p) is a[i * lda + p], or a[p * lda + i] when kTransA.
// kFull: all 32 columns (the masks are ignored). A whole column tile loads B unmasked: with 24
// accumulators live the compiler keeps the masks on the stack and reloads both every k step, and
// those mask loads cost ~10% of the tile (n = 64: 3.25 against 2.9 us).
template <int MR, bool kTransA, bool kFull>
__attribute__((target("avx512f"))) void Tile(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                             int64_t ldc, bool accumulate, __mmask16 m0, __mmask16 m1) {
  if constexpr (kFull) m0 = m1 = 0xFFFF;
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b + p * ldb;
    const __m512 b0 = kFull ? _mm512_loadu_ps(bp) : _mm512_maskz_loadu_ps(m0, bp);
    const __m512 b1 = kFull ? _mm512_loadu_ps(bp + 16) : _mm512_maskz_loadu_ps(m1, bp + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 x = _mm512_set1_ps(kTransA ? a[p * lda + i] : a[i * lda + p]);
      acc0[i] = _mm512_fmadd_ps(x, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(x, b1, acc1[i]);
    }
  }
  StoreTile<MR>(acc0, acc1, c, ldc, accumulate, m0, m1);
}

template <bool kTransA, bool kFull, size_t... I>
constexpr auto Tiles(std::index_sequence<I...>) {
  return std::array<TileFn, sizeof...(I)>{(I == 0 ? nullptr : &Tile<static_cast<int>(I), kTransA, kFull>)...};
}
// kTiles[full][trans_a][mr], mr in 1..kMaxMR; full: the column tile is all 32 wide.
using TileRow = std::array<TileFn, kMaxMR + 1>;
constexpr auto kMrs = std::make_index_sequence<kMaxMR + 1>{};
const TileRow kTiles[2][2] = {{Tiles<false, false>(kMrs), Tiles<true, false>(kMrs)},
                              {Tiles<false, true>(kMrs), Tiles<true, true>(kMrs)}};

// bp[sliver][p][32] = op(B)(p0 + p, j0 + sliver * 32 + j), zero past column nc.
__attribute__((target("avx512f"))) void PackB(const float* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc,
                                              int64_t j0, int64_t nc, float* bp) {
  if (!trans) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b + (p0 + p) * n + j0;
      for (int64_t jr = 0; jr < nc; jr += kNR) {
        float* dst = bp + jr * kc + p * kNR;
        const int64_t nr = nc - jr;
        _mm512_store_ps(dst, _mm512_maskz_loadu_ps(Lanes16(nr), src + jr));
        _mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(Lanes16(nr - 16), src + jr + 16));
      }
    }
    return;
  }
  // op(B)(p, j) = b[j * k + p]: B's rows j are the sliver's columns. 16 rows x 16 k are
  // transposed in registers (a scalar transpose here cost a third of a forward A·B^T at 100
  // tokens); rows past column nc pack zeros and read nothing.
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    for (int64_t h = 0; h < kNR; h += 16) {
      const int64_t rows = std::clamp<int64_t>(nc - jr - h, 0, 16);
      const float* src = b + (j0 + jr + h) * k + p0;
      float* dst = bp + jr * kc + h;
      int64_t p = 0;
      for (; p + 16 <= kc; p += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_ps(j < rows ? 0xFFFF : 0, src + j * k + p);
        Transpose16(r);
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) _mm512_store_ps(dst + (p + q) * kNR, r[q]);
      }
      for (; p < kc; ++p) {
        for (int64_t j = 0; j < 16; ++j) dst[p * kNR + j] = j < rows ? src[j * k + p] : 0.0f;
      }
    }
  }
}

thread_local AlignedScratch b_pack;

}  // namespace

void MatmulF32Avx512(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  if (k == 0) {
    std::fill_n(c, static_cast<size_t>(m * n), 0.0f);
    return;
  }
  const bool pack = trans_b || std::min(k, kKC) * n > kDirectB;
  float* bp = pack ? b_pack.Get<float>(static_cast<size_t>(std::min(k, kKC) * ((std::min(n, kNC) + kNR - 1) / kNR * kNR))) : nullptr;
  const int64_t lda = trans_a ? m : k;
  // Equal row blocks of at most kMC rows.
  const int64_t m_blocks = (m + kMC - 1) / kMC, mc_step = (m + m_blocks - 1) / m_blocks;
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      const bool accumulate = pc > 0;
      if (pack) PackB(b, trans_b, n, k, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += mc_step) {
        const int64_t mc = std::min(mc_step, m - ic);
        const int64_t n_tiles = (mc + kMaxMR - 1) / kMaxMR, base = mc / n_tiles, extra = mc % n_tiles;
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = nc - jr;
          const __mmask16 m0 = Lanes16(nr), m1 = Lanes16(nr - 16);
          const TileRow& tiles = kTiles[nr >= kNR ? 1 : 0][trans_a ? 1 : 0];
          const float* bs = pack ? bp + jr * kc : b + pc * n + jc + jr;
          const int64_t ldb = pack ? kNR : n;
          int64_t row = ic;
          for (int64_t t = 0; t < n_tiles; ++t) {
            const int64_t mr = base + (t < extra ? 1 : 0);
            const float* as = trans_a ? a + pc * m + row : a + row * k + pc;
            tiles[mr](kc, as, lda, bs, ldb, c + row * n + jc + jr, n, accumulate, m0, m1);
            row += mr;
          }
        }
      }
    }
  }
}

}  // namespace ascent::fast
