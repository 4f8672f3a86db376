// The AVX-512 BF16 matmul: vdpbf16ps multiplies PAIRS of bf16 along k into fp32 accumulators
// (32 products per instruction, the FMA's 16 twice over), so A and B are read as 32-bit words,
// each one (k, k + 1) pair. Where it issues at a quarter of the FMA's rate (Sapphire Rapids:
// bench/dev/bf16_peaks.cc), that is half the fp32 flop rate, so bf16 inputs go to the AMX kernel
// (matmul_amx.cc) where AMX is usable and come here only where it is not.
//
// Built like the fp32 path (matmul_avx512.cc), because at the training step's sizes copying
// operands costs as much as the dot products they feed:
//  - a row-major A is never copied: a pair of one row is one 32-bit word in memory, broadcast
//    straight from A. A transposed A holds a pair in two rows, so each row block is interleaved
//    into words once per k slice (vector permutes, 32 rows at a time);
//  - B is always packed, into 32-column slivers of words [pair][32], with vector permutes
//    (row-major B: two rows interleaved) or the 16 x 16 word transpose (transposed B: a pair
//    is already one word); a B panel is packed once and read by every row block;
//  - a tile is MR x 32 with MR in 1..12, each row block split into equal tiles, and the last
//    column tile masks its stores: no staging tile and no padded rows;
//  - an odd k ends in a half pair: its missing half is zero in packed B,  and only the low
//    half is read from A (its high half would be the next row's first element, which could be
//    inf or NaN, and inf * 0 is NaN; past the last row it is past the buffer).
// The first kc slice stores into C and later ones accumulate (C's old contents never matter).
// Packed buffers are thread_local scratch grown on demand: nothing is allocated per call in the
// steady state.
#include "kernels/matmul_bf16.h"
#include "kernels/scratch.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/matmul_tile.h"
#include "kernels/matmul_transpose.h"

#define ASCENT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace ascent::fast {
namespace {

// kKC bf16 of k per slice (a 32-column B sliver of kKC / 2 words is 32 KiB: L1); kNC columns
// per packed B panel (kKC x kNC bf16 = 512 KiB: half of L2); kMC rows of A per block.
constexpr int64_t kNR = 32, kMaxMR = 12, kKC = 512, kNC = 512, kMC = 144;

using TileFn = void (*)(int64_t kc, const uint16_t* a, int64_t lda, const uint32_t* b, float* c, int64_t ldc,
                        bool accumulate, __mmask16 m0, __mmask16 m1);

// The word of row i, pair q: two bf16 at a[i * lda + 2q] (row-major A, lda in bf16), or one
// packed word at a[(q * lda + i) * 2] (kPacked: a transposed A interleaved, lda in words).
template <bool kPacked>
inline uint32_t Word(const uint16_t* a, int64_t lda, int i, int64_t q) {
  uint32_t w;
  std::memcpy(&w, kPacked ? a + 2 * (q * lda + i) : a + i * lda + 2 * q, sizeof w);
  return w;
}
// The half pair that ends an odd k: only its low bf16 (a row-major A's row may end the buffer,
// so nothing past it is read).
template <bool kPacked>
inline uint32_t HalfWord(const uint16_t* a, int64_t lda, int i, int64_t q) {
  return kPacked ? a[2 * (q * lda + i)] : a[i * lda + 2 * q];
}

// c[i][j] (=|+=) sum over kc of op(A)(i, p) * B(p, j) for i < MR, the columns m0 | m1 << 16
// select; b is one packed sliver, [ceil(kc / 2)][32] words.
template <int MR, bool kPacked>
ASCENT_BF16_TARGET void Tile(int64_t kc, const uint16_t* a, int64_t lda, const uint32_t* b, float* c, int64_t ldc,
                             bool accumulate, __mmask16 m0, __mmask16 m1) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  const int64_t kp = kc / 2;
#pragma GCC unroll 2
  for (int64_t q = 0; q < kp; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + q * kNR), b1 = (__m512bh)_mm512_load_si512(b + q * kNR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(Word<kPacked>(a, lda, i, q)));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], x, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], x, b1);
    }
  }
  if (kc & 1) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + kp * kNR), b1 = (__m512bh)_mm512_load_si512(b + kp * kNR + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(HalfWord<kPacked>(a, lda, i, kp)));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], x, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], x, b1);
    }
  }
  StoreTile<MR>(acc0, acc1, c, ldc, accumulate, m0, m1);
}

template <bool kPacked, size_t... I>
constexpr auto Tiles(std::index_sequence<I...>) {
  return std::array<TileFn, sizeof...(I)>{(I == 0 ? nullptr : &Tile<static_cast<int>(I), kPacked>)...};
}
// kTiles[packed][mr], mr in 1..kMaxMR.
const std::array<TileFn, kMaxMR + 1> kTiles[2] = {Tiles<false>(std::make_index_sequence<kMaxMR + 1>{}),
                                                  Tiles<true>(std::make_index_sequence<kMaxMR + 1>{})};

// bp[sliver][q][32] = the pair (p0 + 2q, p0 + 2q + 1) of op(B) at column j0 + sliver * 32 + j,
// zero past column nc and past row kc.
ASCENT_BF16_TARGET void PackB(const uint16_t* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t j0,
                              int64_t nc, uint32_t* bp) {
  const int64_t kp = (kc + 1) / 2;
  if (!trans) {
    for (int64_t q = 0; q < kp; ++q) {
      const uint16_t* lo = b + (p0 + 2 * q) * n + j0;
      const bool has_hi = 2 * q + 1 < kc;
      for (int64_t jr = 0; jr < nc; jr += kNR) {
        const __mmask32 cols = Lanes32(nc - jr);
        const __m512i l = _mm512_maskz_loadu_epi16(cols, lo + jr);
        const __m512i h = has_hi ? _mm512_maskz_loadu_epi16(cols, lo + n + jr) : _mm512_setzero_si512();
        __m512i w0, w1;
        InterleavePairs(l, h, w0, w1);
        uint32_t* dst = bp + jr * kp + q * kNR;
        _mm512_store_si512(dst, w0);
        _mm512_store_si512(dst + 16, w1);
      }
    }
    return;
  }
  // op(B)(p, j) = b[j * k + p]: a pair is one word of B's row j, and a sliver is 16 x 16 word
  // transposes. The half pair of an odd kc and the last < 16 pairs go word by word.
  const int64_t full = kc / 2;
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    for (int64_t h = 0; h < kNR; h += 16) {
      const int64_t rows = std::clamp<int64_t>(nc - jr - h, 0, 16);
      const uint16_t* src = b + (j0 + jr + h) * k + p0;
      uint32_t* dst = bp + jr * kp + h;
      int64_t q = 0;
      for (; q + 16 <= full; q += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_ps(j < rows ? 0xFFFF : 0, reinterpret_cast<const float*>(src + j * k + 2 * q));
        Transpose16(r);
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t) _mm512_store_ps(reinterpret_cast<float*>(dst + (q + t) * kNR), r[t]);
      }
      for (; q < kp; ++q) {
        for (int64_t j = 0; j < 16; ++j) {
          uint32_t w = 0;
          if (j < rows) {
            w = src[j * k + 2 * q];
            if (2 * q + 1 < kc) w |= static_cast<uint32_t>(src[j * k + 2 * q + 1]) << 16;
          }
          dst[q * kNR + j] = w;
        }
      }
    }
  }
}

// A transposed (op(A)(i, p) = a[p * m + i]): ap[q][ld] words = the pair (p0 + 2q, p0 + 2q + 1)
// of rows i0 .. i0 + mc, with ld = mc rounded up to 32; zero past row kc.
ASCENT_BF16_TARGET void PackATrans(const uint16_t* a, int64_t m, int64_t p0, int64_t kc, int64_t i0, int64_t mc, int64_t ld,
                                   uint32_t* ap) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t q = 0; q < kp; ++q) {
    const uint16_t* lo = a + (p0 + 2 * q) * m + i0;
    const bool has_hi = 2 * q + 1 < kc;
    for (int64_t i = 0; i < mc; i += 32) {
      const __mmask32 rows = Lanes32(mc - i);
      const __m512i l = _mm512_maskz_loadu_epi16(rows, lo + i);
      const __m512i h = has_hi ? _mm512_maskz_loadu_epi16(rows, lo + m + i) : _mm512_setzero_si512();
      __m512i w0, w1;
      InterleavePairs(l, h, w0, w1);
      _mm512_store_si512(ap + q * ld + i, w0);
      _mm512_store_si512(ap + q * ld + i + 16, w1);
    }
  }
}

thread_local AlignedScratch b_pack, a_pack;

}  // namespace

void MatmulBf16Avx512(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a,
                      bool trans_b) {
  if (k == 0) {
    std::fill_n(c, static_cast<size_t>(m * n), 0.0f);
    return;
  }
  const int64_t kp_max = (std::min(k, kKC) + 1) / 2;
  uint32_t* bp = b_pack.Get<uint32_t>(static_cast<size_t>(kp_max * ((std::min(n, kNC) + kNR - 1) / kNR * kNR)));
  // Equal row blocks of at most kMC rows.
  const int64_t m_blocks = (m + kMC - 1) / kMC, mc_step = (m + m_blocks - 1) / m_blocks;
  const int64_t a_ld = (mc_step + 31) / 32 * 32;
  uint32_t* ap = trans_a ? a_pack.Get<uint32_t>(static_cast<size_t>(kp_max * a_ld)) : nullptr;
  const auto& tiles = kTiles[trans_a ? 1 : 0];
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc), kp = (kc + 1) / 2;
      const bool accumulate = pc > 0;
      PackB(b, trans_b, n, k, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += mc_step) {
        const int64_t mc = std::min(mc_step, m - ic);
        if (trans_a) PackATrans(a, m, pc, kc, ic, mc, a_ld, ap);
        const int64_t n_tiles = (mc + kMaxMR - 1) / kMaxMR, base = mc / n_tiles, extra = mc % n_tiles;
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = nc - jr;
          const __mmask16 m0 = Lanes16(nr), m1 = Lanes16(nr - 16);
          const uint32_t* bs = bp + jr * kp;
          int64_t row = 0;
          for (int64_t t = 0; t < n_tiles; ++t) {
            const int64_t mr = base + (t < extra ? 1 : 0);
            const uint16_t* as = trans_a ? reinterpret_cast<const uint16_t*>(ap + row) : a + (ic + row) * k + pc;
            tiles[mr](kc, as, trans_a ? a_ld : k, bs, c + (ic + row) * n + jc + jr, n, accumulate, m0, m1);
            row += mr;
          }
        }
      }
    }
  }
}

}  // namespace ascent::fast
