// The AVX2+FMA fp32 matmul for CPUs without AVX-512, at the shapes the trainer and the engine run
// (M from a few rows to a few thousand, K and N 64..768), in the three forms a linear layer runs.
//
// Why not the packed path of matmul.cc: there packing A (a scalar strided gather) and copying
// every edge tile through a staging buffer cost as much as the FMAs at these sizes (OpenBLAS
// was twice as fast at n = 64). So, as in matmul_avx512.cc:
//  - A is not copied below 512 on some dim: a tile's MR rows are broadcast straight from op(A),
//    row-major or transposed (a transposed A gives MR consecutive floats per k). From 512 on in
//    every dim each tile's rows are packed k-major (8 x 8 register transposes), read as a
//    transposed A (this replaced matmul.cc's packed path there: its scalar A packing and staging
//    tile for edges cost ~5% at n = 512);
//  - B is read in place when op(B) = B and its kc x N block is small (64 KiB); otherwise it is
//    packed into 16-wide slivers (a transposed B through 8 x 8 register transposes);
//  - a tile is MR x 16 (two ymm per row, 2 * MR accumulators; MR <= 6 keeps the 12
//    accumulators, two B vectors and the broadcast in the 16 ymm registers), and a row block is
//    split into equal tiles (64 rows = 9 tiles of 6 and 2 of 5), so no row is padded;
//  - the last column tile masks its B loads and C stores (vmaskmovps): no scalar tail, no
//    staging tile. Full tiles use plain loads.
// Each element of C sums its k products in order, one kc slice at a time (the first slice
// stores, later ones add), so a shape gives the same bits on every run.
#include "kernels/matmul_avx2.h"
#include "kernels/scratch.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <new>
#include <utility>

namespace ascent::fast {
namespace {

// kc x 16 B sliver (16 KiB) in L1; the kc x nc packed B panel (256 KiB) and an A block of kMC
// rows (144 KiB) together in a 512 KiB L2.
constexpr int64_t kNR = 16, kMaxMR = 6, kKC = 256, kNC = 256, kMC = 144;
// With A packed (every dim >= kPackAFrom), B's panel is kc x kNCPacked (2 MiB, in L3), so each A
// block is packed once per k slice and serves up to 128 column tiles.
constexpr int64_t kPackAFrom = 512, kNCPacked = 2048;
// B is read in place while its kc x N block is at most this many floats (64 KiB). Past that a
// sliver's kc rows are >= 1 KiB apart and map to a few L1 sets, evicting one another between
// row tiles: packing measured ~10% faster from 256 x 256 on (the AVX-512 path reads 4x more in place).
constexpr int64_t kDirectB = 16 * 1024;

// The lane mask of the first n of 8 lanes (none when n <= 0, all when n >= 8).
__attribute__((target("avx2"), always_inline)) inline __m256i Lanes8(int64_t n) {
  const int32_t c = static_cast<int32_t>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// (The column count, not its masks, crosses the call: no vector arguments between functions.)
using TileFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                        bool accumulate, int64_t nr);

// c[i][j] (=|+=) sum_p op(A)(i, p) * b[p * ldb + j] for i < MR, j < 16; when kMasked only
// columns j < nr are read from b and c or written (the others may lie past the end).
// op(A)(i, p) is a[i * lda + p], or a[p * lda + i] when kTransA.
template <int MR, bool kTransA, bool kMasked>
__attribute__((target("avx2,fma"))) void Tile(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                              int64_t ldc, bool accumulate, int64_t nr) {
  const __m256i m0 = Lanes8(nr), m1 = Lanes8(nr - 8);
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    // C's tile is read (later k slices) and written only after the k loop: fetch its lines now,
    // while the FMAs run (its rows are N floats apart: no stride prefetcher brings them).
    // Prefetches never fault, so a masked tile's second line may lie past C's end.
    acc0[i] = acc1[i] = _mm256_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b + p * ldb;
    const __m256 b0 = kMasked ? _mm256_maskload_ps(bp, m0) : _mm256_loadu_ps(bp);
    const __m256 b1 = kMasked ? _mm256_maskload_ps(bp + 8, m1) : _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 x = _mm256_broadcast_ss(kTransA ? a + p * lda + i : a + i * lda + p);
      acc0[i] = _mm256_fmadd_ps(x, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(x, b1, acc1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (kMasked) {
      if (accumulate) {
        acc0[i] = _mm256_add_ps(_mm256_maskload_ps(ci, m0), acc0[i]);
        acc1[i] = _mm256_add_ps(_mm256_maskload_ps(ci + 8, m1), acc1[i]);
      }
      _mm256_maskstore_ps(ci, m0, acc0[i]);
      _mm256_maskstore_ps(ci + 8, m1, acc1[i]);
    } else {
      if (accumulate) {
        acc0[i] = _mm256_add_ps(_mm256_loadu_ps(ci), acc0[i]);
        acc1[i] = _mm256_add_ps(_mm256_loadu_ps(ci + 8), acc1[i]);
      }
      _mm256_storeu_ps(ci, acc0[i]);
      _mm256_storeu_ps(ci + 8, acc1[i]);
    }
  }
}

template <bool kTransA, bool kMasked, size_t... I>
constexpr auto Tiles(std::index_sequence<I...>) {
  return std::array<TileFn, sizeof...(I)>{(I == 0 ? nullptr : &Tile<static_cast<int>(I), kTransA, kMasked>)...};
}
// kTiles[trans_a][masked][mr], mr in 1..kMaxMR.
const std::array<TileFn, kMaxMR + 1> kTiles[2][2] = {
    {Tiles<false, false>(std::make_index_sequence<kMaxMR + 1>{}), Tiles<false, true>(std::make_index_sequence<kMaxMR + 1>{})},
    {Tiles<true, false>(std::make_index_sequence<kMaxMR + 1>{}), Tiles<true, true>(std::make_index_sequence<kMaxMR + 1>{})}};

// r[q][j] <- r[j][q]: the 8 x 8 transpose (pairs of rows, then quads within 128-bit lanes, then
// the lanes across registers).
__attribute__((target("avx2"))) inline void Transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// bp[sliver][p][16] = op(B)(p0 + p, j0 + sliver * 16 + j), zero past column nc.
__attribute__((target("avx2"))) void PackB(const float* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t j0,
                                           int64_t nc, float* bp) {
  if (!trans) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b + (p0 + p) * n + j0;
      for (int64_t jr = 0; jr < nc; jr += kNR) {
        float* dst = bp + jr * kc + p * kNR;
        const int64_t nr = nc - jr;
        _mm256_store_ps(dst, _mm256_maskload_ps(src + jr, Lanes8(nr)));
        _mm256_store_ps(dst + 8, _mm256_maskload_ps(src + jr + 8, Lanes8(nr - 8)));
      }
    }
    return;
  }
  // op(B)(p, j) = b[j * k + p]: B's rows j are the sliver's columns, 8 rows x 8 k transposed in
  // registers; rows past column nc pack zeros and read nothing.
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    for (int64_t h = 0; h < kNR; h += 8) {
      const int64_t rows = std::clamp<int64_t>(nc - jr - h, 0, 8);
      const float* src = b + (j0 + jr + h) * k + p0;
      float* dst = bp + jr * kc + h;
      int64_t p = 0;
      for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) r[j] = j < rows ? _mm256_loadu_ps(src + j * k + p) : _mm256_setzero_ps();
        Transpose8(r);
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) _mm256_store_ps(dst + (p + q) * kNR, r[q]);
      }
      for (; p < kc; ++p) {
        for (int64_t j = 0; j < 8; ++j) dst[p * kNR + j] = j < rows ? src[j * k + p] : 0.0f;
      }
    }
  }
}

// The row tiles of a row block: mc rows split into equal tiles of at most kMaxMR (64 rows = 9
// tiles of 6 and 2 of 5), so no row is padded. Tile t has Rows(t) rows and starts First(t) rows in.
struct RowTiles {
  int64_t count, base, extra;
  explicit RowTiles(int64_t mc) : count((mc + kMaxMR - 1) / kMaxMR), base(mc / count), extra(mc % count) {}
  int64_t Rows(int64_t t) const { return base + (t < extra ? 1 : 0); }
  int64_t First(int64_t t) const { return t * base + std::min(t, extra); }
};

// The slack past a packed A block: PackA stores 8 lanes where a tile row has mr <= 8 floats, and the
// lanes past mr spill past the tile's last row (the next row's or tile's stores overwrite them).
constexpr int64_t kPackASlack = 8;

// ap[First(t) * kc + p * mr + i] = op(A)(i0 + First(t) + i, p0 + p) for each tile t of the row
// block, i < mr = Rows(t): each tile's rows packed k-major, so the tile reads them as a transposed A
// whose leading dimension is mr (the kTransA tiles), one contiguous run of kc * mr floats.
__attribute__((target("avx2"))) void PackA(const float* a, bool trans, int64_t m, int64_t k, int64_t i0, int64_t mc, int64_t p0,
                                           int64_t kc, float* ap) {
  const RowTiles tiles(mc);
  for (int64_t t = 0; t < tiles.count; ++t) {
    const int64_t mr = tiles.Rows(t), row = i0 + tiles.First(t);
    float* dst = ap + tiles.First(t) * kc;
    if (trans) {
      // op(A)(i, p) = a[p * m + i]: a tile row is mr consecutive floats of A's row p.
      const __m256i mask = Lanes8(mr);
      const float* src = a + p0 * m + row;
      for (int64_t p = 0; p < kc; ++p) _mm256_storeu_ps(dst + p * mr, _mm256_maskload_ps(src + p * m, mask));
      continue;
    }
    // op(A)(i, p) = a[i * k + p]: 8 k of the mr rows transposed in registers (rows past mr are zero).
    const float* src = a + row * k + p0;
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) r[j] = j < mr ? _mm256_loadu_ps(src + j * k + p) : _mm256_setzero_ps();
      Transpose8(r);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(dst + (p + q) * mr, r[q]);
    }
    for (; p < kc; ++p) {
      for (int64_t i = 0; i < mr; ++i) dst[p * mr + i] = src[i * k + p];
    }
  }
}

thread_local AlignedScratch a_pack, b_pack;

}  // namespace

void MatmulF32Avx2(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  if (k == 0) {
    std::fill_n(c, static_cast<size_t>(m * n), 0.0f);
    return;
  }
  // A is packed once every dim is >= 512: rows of an unpacked A 2 KiB or more apart fall in a few
  // L1 sets and evict one another, and each packed A block serves nc / 16 column tiles. B's panel
  // is then as wide as the packed path's (kNCPacked, in L3), so A is packed once per k slice.
  const bool pack_a = std::min({m, n, k}) >= kPackAFrom;
  const int64_t nc_step = pack_a ? kNCPacked : kNC;
  const bool pack = pack_a || trans_b || std::min(k, kKC) * n > kDirectB;
  const int64_t kc_max = std::min(k, kKC);
  float* bp = pack ? b_pack.Get<float>(static_cast<size_t>(kc_max * ((std::min(n, nc_step) + kNR - 1) / kNR * kNR))) : nullptr;
  // Equal row blocks of at most kMC rows.
  const int64_t m_blocks = (m + kMC - 1) / kMC, mc_step = (m + m_blocks - 1) / m_blocks;
  float* ap = pack_a ? a_pack.Get<float>(static_cast<size_t>(mc_step * kc_max + kPackASlack)) : nullptr;
  // A packed tile is read as a transposed A whose leading dimension is its row count.
  const auto& tiles = kTiles[trans_a || pack_a ? 1 : 0];
  for (int64_t jc = 0; jc < n; jc += nc_step) {
    const int64_t nc = std::min(nc_step, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      const bool accumulate = pc > 0;
      if (pack) PackB(b, trans_b, n, k, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += mc_step) {
        const int64_t mc = std::min(mc_step, m - ic);
        const RowTiles row_tiles(mc);
        if (pack_a) PackA(a, trans_a, m, k, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = nc - jr;
          const auto& fns = tiles[nr < kNR ? 1 : 0];
          const float* bs = pack ? bp + jr * kc : b + pc * n + jc + jr;
          const int64_t ldb = pack ? kNR : n;
          for (int64_t t = 0; t < row_tiles.count; ++t) {
            const int64_t mr = row_tiles.Rows(t), row = ic + row_tiles.First(t);
            const float* as = pack_a ? ap + row_tiles.First(t) * kc : trans_a ? a + pc * m + row : a + row * k + pc;
            const int64_t lda = pack_a ? mr : trans_a ? m : k;
            fns[mr](kc, as, lda, bs, ldb, c + row * n + jc + jr, n, accumulate, nr);
          }
        }
      }
    }
  }
}

}  // namespace ascent::fast
