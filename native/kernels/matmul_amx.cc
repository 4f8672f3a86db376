// The AMX bf16 matmul: tdpbf16ps multiplies a 16 x 32 bf16 tile of A by a 32 x 16 bf16 tile of
// B into a 16 x 16 fp32 tile of C, 16 K flops per instruction (vdpbf16ps does 64).
//
// Tiles (one configuration per call, every tile 16 rows x 64 bytes):
//  - tmm0-3: a 32 x 32 block of C, 2 x 2 tiles of 16 x 16 fp32 (tmm0 top left, tmm1 top right,
//    tmm2 bottom left, tmm3 bottom right);
//  - tmm4-5: the two row tiles of A, 16 rows x 32 bf16 of k each;
//  - tmm6-7: the two column tiles of B in pair form: row q holds the (2q, 2q + 1) pair of each of
//    16 columns as one 32-bit word.
// Blocking: for each kNC-wide column panel and kKC-deep k slice, B is packed once into 16-column
// groups of such tiles (vector permutes for a row-major B, 16 x 16 word transposes for a
// transposed one), zero past column n and past row kc, and read by every row block. For each
// 32-row block, an A tile is read in place from a row-major A when it is whole (16 rows, 32 k
// inside the slice); the rest is packed into zeroed tiles (a transposed A always: pairs of its
// rows interleaved, then 16 x 16 word transposes). The block then walks the panel's 32-column
// blocks, its C tiles held in tmm0-3 across the slice.
// Edges:
//  - a block with 16 rows or columns or fewer runs only the tiles that cover it;
//  - a partial C tile goes through a staging tile, copied with masked loads and stores;
//  - packing reads only a row's elements inside the slice (masked loads), so an odd k's half
//    pair ends in zero and nothing past a row, or past the buffer, is read (an inf there times
//    a zero pad would be NaN).
// The first kc slice stores into C and later ones accumulate (C's tiles are loaded first), so
// C's old contents never matter. The tile state is released at the end of each call: an idle
// stream thread carries none.
#include "kernels/matmul_amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "kernels/matmul_tile.h"
#include "kernels/matmul_transpose.h"
#include "kernels/scratch.h"

#define ASCENT_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))

// The tile instructions as inline asm with the tile number spelled out and memory named: GCC's
// _tile_* macros declare no memory operand, so the compiler could move a staging tile's stores
// past the tile load that reads them.
#define ASCENT_TILE_LOAD(t, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define ASCENT_TILE_STORE(t, base, stride) \
  asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define ASCENT_TILE_ZERO(t) asm volatile("tilezero %%tmm" #t ::)
// tmm c += tmm a . tmm b
#define ASCENT_TILE_DP(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

namespace ascent::fast {
namespace {

// Empty when this process may use AMX-BF16 tiles, else why not.
std::string ProbeAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) {
    return "the CPU lacks AMX-BF16 or AMX-TILE (CPUID leaf 7, EDX bits 22 and 24)";
  }
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return "the OS has not enabled XSAVE (CPUID OSXSAVE is clear)";
  uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return "the OS does not enable the tile state (XCR0 bits 17 and 18)";
  // The tile data is a dynamically enabled feature: a process asks for it once, for all its threads.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return std::string("the OS refused the tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") + std::strerror(errno) + ")";
  }
  return "";
}

// kKC bf16 of k per slice (a 32-row block of A is 32 KiB: L1), kNC columns per packed B panel
// (kKC x kNC bf16 = 512 KiB: a quarter of L2).
constexpr int64_t kKC = 512, kNC = 512, kMaxKb = kKC / 32;
constexpr int64_t kTileWords = 256;  // one 16 x 64-byte tile in 32-bit words

// The words of one packed B group (16 columns) for a kc-deep slice: its ceil(kc / 32) tiles and
// one cache line more, so groups are not a power of two apart (packing a row-major B writes one
// row of every group in turn, and rows 4 KiB apart would all fall in one L1 set).
constexpr int64_t GroupWords(int64_t kc) { return (kc + 31) / 32 * kTileWords + 16; }

// Palette 1: tiles 0-7 all 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

ASCENT_AMX_TARGET void ConfigureTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  asm volatile("ldtilecfg %0" ::"m"(cfg));
}

ASCENT_AMX_TARGET void ReleaseTiles() { asm volatile("tilerelease" ::: "memory"); }

// C tile t (0-3) from / to memory, or zeroed: the tile number must be spelled out in the instruction.
ASCENT_AMX_TARGET void LoadC(int t, const float* p, int64_t stride) {
  switch (t) {
    case 0: ASCENT_TILE_LOAD(0, p, stride); break;
    case 1: ASCENT_TILE_LOAD(1, p, stride); break;
    case 2: ASCENT_TILE_LOAD(2, p, stride); break;
    default: ASCENT_TILE_LOAD(3, p, stride); break;
  }
}
ASCENT_AMX_TARGET void StoreC(int t, float* p, int64_t stride) {
  switch (t) {
    case 0: ASCENT_TILE_STORE(0, p, stride); break;
    case 1: ASCENT_TILE_STORE(1, p, stride); break;
    case 2: ASCENT_TILE_STORE(2, p, stride); break;
    default: ASCENT_TILE_STORE(3, p, stride); break;
  }
}
ASCENT_AMX_TARGET void ZeroC(int t) {
  switch (t) {
    case 0: ASCENT_TILE_ZERO(0); break;
    case 1: ASCENT_TILE_ZERO(1); break;
    case 2: ASCENT_TILE_ZERO(2); break;
    default: ASCENT_TILE_ZERO(3); break;
  }
}

// bp[group * GroupWords(kc) + q * 16 + j] = the pair (p0 + 2q, p0 + 2q + 1) of op(B) at column
// j0 + 16 * group + j, q < kp2 = 16 * ceil(kc / 32); zero past column nc and past row kc. Tile
// (group, kb) is the 16 rows q = 16 kb ... 16 kb + 15 of its group.
ASCENT_AMX_TARGET void PackB(const uint16_t* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                             uint32_t* bp) {
  const int64_t kp2 = (kc + 31) / 32 * 16, gw = GroupWords(kc);
  if (!trans) {
    // A pair is two rows of B: 32 columns of both interleaved into two groups' rows at once.
    for (int64_t q = 0; q < kp2; ++q) {
      const int64_t p = 2 * q;
      const uint16_t* lo = b + (p0 + p) * n + j0;
      for (int64_t jr = 0; jr < nc; jr += 32) {
        const __mmask32 cols = Lanes32(nc - jr);
        const __m512i l = p < kc ? _mm512_maskz_loadu_epi16(cols, lo + jr) : _mm512_setzero_si512();
        const __m512i h = p + 1 < kc ? _mm512_maskz_loadu_epi16(cols, lo + n + jr) : _mm512_setzero_si512();
        __m512i w0, w1;
        InterleavePairs(l, h, w0, w1);
        uint32_t* dst = bp + jr / 16 * gw + q * 16;
        _mm512_store_si512(dst, w0);
        _mm512_store_si512(dst + gw, w1);
      }
    }
    return;
  }
  // op(B)(p, j) = b[j * k + p]: a pair is one word of B's row j, so 16 rows x 16 words of B
  // transpose into 16 pair rows of a group.
  const int64_t groups = (nc + 31) / 32 * 2;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = std::clamp<int64_t>(nc - 16 * g, 0, 16);
    const uint16_t* src = b + (j0 + 16 * g) * k + p0;
    uint32_t* dst = bp + g * gw;
    for (int64_t q = 0; q < kp2; q += 16) {
      const __mmask32 inside = Lanes32(kc - 2 * q);
      __m512 r[16];
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        r[j] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(j < rows ? inside : 0, src + j * k + 2 * q));
      }
      Transpose16(r);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) _mm512_store_ps(reinterpret_cast<float*>(dst + (q + t) * 16), r[t]);
    }
  }
}

// Where tile (rt, kb) of A's 32-row block starts and its row stride in bytes.
struct ATiles {
  const void* ptr[2][kMaxKb];
  int64_t stride[2][kMaxKb];
};

// The A tiles of rows i0 .. i0 + 32 (those below m) for the slice p0 .. p0 + kc: in place when
// whole and A is row-major, else packed into ap (tile (rt, kb) at ap + (rt * kMaxKb + kb) * 512
// bf16), zero past row m and past k = kc.
ASCENT_AMX_TARGET void PrepareA(const uint16_t* a, bool trans, int64_t m, int64_t k, int64_t i0, int64_t p0, int64_t kc,
                                uint16_t* ap, ATiles& at) {
  const int64_t nkb = (kc + 31) / 32, mrows = std::min<int64_t>(32, m - i0), rts = mrows > 16 ? 2 : 1;
  if (trans) {
    // op(A)(i, p) = a[p * m + i]: rows p, p + 1 of A interleave into the pairs of 32 rows i, and
    // a 16 x 16 word transpose per row tile turns [pair][row] into the tile's [row][pair].
    const __mmask32 rows = Lanes32(mrows);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      __m512 w[2][16];
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int64_t p = 32 * kb + 2 * q;
        const uint16_t* src = a + (p0 + p) * m + i0;
        const __m512i l = p < kc ? _mm512_maskz_loadu_epi16(rows, src) : _mm512_setzero_si512();
        const __m512i h = p + 1 < kc ? _mm512_maskz_loadu_epi16(rows, src + m) : _mm512_setzero_si512();
        __m512i w0, w1;
        InterleavePairs(l, h, w0, w1);
        w[0][q] = _mm512_castsi512_ps(w0);
        w[1][q] = _mm512_castsi512_ps(w1);
      }
      for (int64_t rt = 0; rt < rts; ++rt) {
        Transpose16(w[rt]);
        uint16_t* dst = ap + (rt * kMaxKb + kb) * 512;
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) _mm512_store_ps(reinterpret_cast<float*>(dst + r * 32), w[rt][r]);
        at.ptr[rt][kb] = dst;
        at.stride[rt][kb] = 64;
      }
    }
    return;
  }
  for (int64_t rt = 0; rt < rts; ++rt) {
    const int64_t r0 = i0 + 16 * rt, rows = std::min<int64_t>(16, m - r0);
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t kv = std::min<int64_t>(32, kc - 32 * kb);
      const uint16_t* src = a + r0 * k + p0 + 32 * kb;
      if (rows == 16 && kv == 32) {
        at.ptr[rt][kb] = src;
        at.stride[rt][kb] = k * 2;
        continue;
      }
      uint16_t* dst = ap + (rt * kMaxKb + kb) * 512;
      const __mmask32 inside = Lanes32(kv);
      for (int64_t r = 0; r < 16; ++r) {
        _mm512_store_si512(dst + r * 32, r < rows ? _mm512_maskz_loadu_epi16(inside, src + r * k) : _mm512_setzero_si512());
      }
      at.ptr[rt][kb] = dst;
      at.stride[rt][kb] = 64;
    }
  }
}

// C's 32 x 32 block at c (rows x cols of it inside C, RT / CT = how many 16-row / 16-column
// tiles that takes) (=|+=) the slice's product: A tiles from `at`, B tiles from the groups at b0
// and b0 + group_words.
template <int RT, int CT>
ASCENT_AMX_TARGET void Block(int64_t nkb, const ATiles& at, const uint32_t* b0, int64_t group_words, float* c, int64_t ldc,
                             int64_t rows, int64_t cols, bool accumulate) {
  alignas(64) float stage[4][256];
  const uint32_t* b1 = b0 + group_words;
  for (int rt = 0; rt < RT; ++rt) {
    for (int ct = 0; ct < CT; ++ct) {
      const int t = 2 * rt + ct;
      const int64_t tr = std::min<int64_t>(16, rows - 16 * rt);
      const float* ct_c = c + 16 * rt * ldc + 16 * ct;
      if (!accumulate) {
        ZeroC(t);
      } else if (tr == 16 && cols - 16 * ct >= 16) {
        LoadC(t, ct_c, ldc * 4);
      } else {
        const __mmask16 lanes = Lanes16(cols - 16 * ct);
        for (int64_t r = 0; r < 16; ++r) {
          _mm512_store_ps(stage[t] + 16 * r, r < tr ? _mm512_maskz_loadu_ps(lanes, ct_c + r * ldc) : _mm512_setzero_ps());
        }
        LoadC(t, stage[t], 64);
      }
    }
  }
  for (int64_t kb = 0; kb < nkb; ++kb) {
    ASCENT_TILE_LOAD(4, at.ptr[0][kb], at.stride[0][kb]);
    if constexpr (RT == 2) ASCENT_TILE_LOAD(5, at.ptr[1][kb], at.stride[1][kb]);
    ASCENT_TILE_LOAD(6, b0 + kb * kTileWords, 64);
    if constexpr (CT == 2) ASCENT_TILE_LOAD(7, b1 + kb * kTileWords, 64);
    ASCENT_TILE_DP(0, 4, 6);
    if constexpr (CT == 2) ASCENT_TILE_DP(1, 4, 7);
    if constexpr (RT == 2) ASCENT_TILE_DP(2, 5, 6);
    if constexpr (RT == 2 && CT == 2) ASCENT_TILE_DP(3, 5, 7);
  }
  for (int rt = 0; rt < RT; ++rt) {
    for (int ct = 0; ct < CT; ++ct) {
      const int t = 2 * rt + ct;
      const int64_t tr = std::min<int64_t>(16, rows - 16 * rt);
      float* ct_c = c + 16 * rt * ldc + 16 * ct;
      if (tr == 16 && cols - 16 * ct >= 16) {
        StoreC(t, ct_c, ldc * 4);
        continue;
      }
      StoreC(t, stage[t], 64);
      const __mmask16 lanes = Lanes16(cols - 16 * ct);
      for (int64_t r = 0; r < tr; ++r) _mm512_mask_storeu_ps(ct_c + r * ldc, lanes, _mm512_load_ps(stage[t] + 16 * r));
    }
  }
}

thread_local AlignedScratch b_pack, a_pack;

}  // namespace

const char* AmxUnusableReason() {
  static const std::string reason = ProbeAmx();
  return reason.empty() ? nullptr : reason.c_str();
}

void MatmulBf16Amx(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
  if (k == 0) {
    std::fill_n(c, static_cast<size_t>(m * n), 0.0f);
    return;
  }
  // Scratch first: nothing may throw while the tiles are configured.
  uint32_t* bp = b_pack.Get<uint32_t>(static_cast<size_t>((std::min(n, kNC) + 31) / 32 * 2 * GroupWords(std::min(k, kKC))));
  uint16_t* ap = a_pack.Get<uint16_t>(static_cast<size_t>(2 * kMaxKb * 512));
  ATiles at;
  ConfigureTiles();
  for (int64_t jc = 0; jc < n; jc += kNC) {
    const int64_t nc = std::min(kNC, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc), nkb = (kc + 31) / 32, group_words = GroupWords(kc);
      const bool accumulate = pc > 0;
      PackB(b, trans_b, n, k, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += 32) {
        const int64_t rows = std::min<int64_t>(32, m - ic);
        PrepareA(a, trans_a, m, k, ic, pc, kc, ap, at);
        for (int64_t jr = 0; jr < nc; jr += 32) {
          const int64_t cols = std::min<int64_t>(32, nc - jr);
          const uint32_t* b0 = bp + jr / 16 * group_words;
          float* cb = c + ic * n + jc + jr;
          if (rows > 16) {
            if (cols > 16) Block<2, 2>(nkb, at, b0, group_words, cb, n, rows, cols, accumulate);
            else Block<2, 1>(nkb, at, b0, group_words, cb, n, rows, cols, accumulate);
          } else {
            if (cols > 16) Block<1, 2>(nkb, at, b0, group_words, cb, n, rows, cols, accumulate);
            else Block<1, 1>(nkb, at, b0, group_words, cb, n, rows, cols, accumulate);
          }
        }
      }
    }
  }
  ReleaseTiles();
}

}  // namespace ascent::fast
