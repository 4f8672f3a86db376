// The fast matmul: C (fp32 or bf16) = op(A) . op(B), fp32 accumulation, batched.
//
// Blocking (BLIS order): for each NC-wide column panel of B and KC-deep slice, pack B
// into NR-wide slivers; for each MC-tall block of A pack MR-tall slivers; a micro-kernel
// computes an MR x NR tile of C from one A sliver and one B sliver held in registers.
// Packing zero-pads the edges, so a micro-kernel never branches on shape.
//
// Micro-kernels (chosen once from the CPU, or forced by the setMatmulKernel test hook):
//  - avx512:      12 x 32 fp32 tile in 24 zmm accumulators (FMA, 16 lanes); fp32 inputs go
//                 to matmul_avx512.cc instead (A unpacked, B packed only when it must be),
//                 bf16 inputs on a CPU without avx512-bf16 use this packed kernel;
//  - amx-bf16:    bf16 inputs only: matmul_amx.cc, AMX tiles (tdpbf16ps: a 16 x 32 by 32 x 16
//                 bf16 tile product into 16 x 16 fp32 per instruction); the bf16 choice where
//                 the CPU has AMX-BF16 and the OS lets this process use the tile state;
//  - avx512-bf16: bf16 inputs only: matmul_bf16.cc, where vdpbf16ps multiplies PAIRS of bf16
//                 along k into fp32 accumulators (twice the FMA's products per instruction, but
//                 half the fp32 flop rate on Sapphire Rapids: bench/dev/bf16_peaks.cc); the
//                 bf16 choice without AMX;
//  - avx2-fma:    6 x 16 fp32 tile in 12 ymm accumulators; fp32 inputs go to matmul_avx2.cc
//                 instead (A unpacked below 512 on some dim, B packed only when it must be);
//  - portable:    6 x 16, plain C++.
// fp32 kernels read bf16 inputs converted to fp32 while packing.
//
// Invariants:
//  - the first KC slice stores into C and later slices accumulate, so C is never
//    zeroed in a separate pass (and its old contents never matter: beta = 0);
//  - packed buffers are thread_local scratch, 64-byte aligned, grown on demand and
//    reused across calls: a matmul allocates nothing in the steady state;
//  - a packed B sliver row is whole cache lines, so it is loaded aligned.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/dtype.h"
#include "kernels/fast.h"
#include "kernels/matmul_avx2.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_avx512.h"
#include "kernels/matmul_bf16.h"
#include "kernels/scratch.h"

namespace ascent::fast {
namespace {

// KC x NR B sliver stays in L1; MC x KC A block in L2; KC x NC B panel in L3.
constexpr int64_t KC = 256, MC_MAX = 144, NC = 2048;
constexpr int64_t MAX_MR = 12, MAX_NR = 32;

// c[i * ldc + j] (=|+=) sum over the packed k of A(i, k) * B(k, j) for the full MR x NR tile.
using MicroKernel = void (*)(int64_t kc, const void* a, const void* b, float* c, int64_t ldc, bool accumulate);

struct KernelSpec {
  const char* name;
  int64_t mr, nr;
  MicroKernel fn;  // null for amx-bf16 and avx512-bf16, which have their own blocking (matmul_amx.cc, matmul_bf16.cc)
};

void MicroKernelPortable(int64_t kc, const void* av, const void* bv, float* c, int64_t ldc, bool accumulate) {
  constexpr int64_t MR = 6, NR = 16;
  const float* a = static_cast<const float*>(av);
  const float* b = static_cast<const float*>(bv);
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < MR; ++i) {
      float x = a[p * MR + i];
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += x * b[p * NR + j];
    }
  }
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const void* av, const void* bv, float* c,
                                                        int64_t ldc, bool accumulate) {
  constexpr int64_t MR = 6, NR = 16;
  const float* a = static_cast<const float*>(av);
  const float* b = static_cast<const float*>(bv);
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int64_t i = 0; i < MR; ++i) {
    // C's tile is read and written only after the k loop: fetch its lines now, while the FMAs
    // run (~15% at n = 1024, where C's rows are 4 KiB apart and out of L2 between k slices).
    acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(b + p * NR), b1 = _mm256_load_ps(b + p * NR + 8);
#pragma GCC unroll 6
    for (int64_t i = 0; i < MR; ++i) {
      const __m256 x = _mm256_broadcast_ss(a + p * MR + i);
      acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int64_t i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm256_add_ps(_mm256_loadu_ps(ci), acc[i][0]);
      acc[i][1] = _mm256_add_ps(_mm256_loadu_ps(ci + 8), acc[i][1]);
    }
    _mm256_storeu_ps(ci, acc[i][0]);
    _mm256_storeu_ps(ci + 8, acc[i][1]);
  }
}

__attribute__((target("avx512f"))) void MicroKernelAvx512(int64_t kc, const void* av, const void* bv, float* c,
                                                         int64_t ldc, bool accumulate) {
  constexpr int64_t MR = 12, NR = 32;
  const float* a = static_cast<const float*>(av);
  const float* b = static_cast<const float*>(bv);
  __m512 acc[MR][2];
#pragma GCC unroll 12
  for (int64_t i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(b + p * NR), b1 = _mm512_load_ps(b + p * NR + 16);
#pragma GCC unroll 12
    for (int64_t i = 0; i < MR; ++i) {
      const __m512 x = _mm512_set1_ps(a[p * MR + i]);
      acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 12
  for (int64_t i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][0]);
      acc[i][1] = _mm512_add_ps(_mm512_loadu_ps(ci + 16), acc[i][1]);
    }
    _mm512_storeu_ps(ci, acc[i][0]);
    _mm512_storeu_ps(ci + 16, acc[i][1]);
  }
}

const KernelSpec kPortable{"portable", 6, 16, MicroKernelPortable};
const KernelSpec kAvx2{"avx2-fma", 6, 16, MicroKernelAvx2};
const KernelSpec kAvx512{"avx512", 12, 32, MicroKernelAvx512};
const KernelSpec kAvx512Bf16{"avx512-bf16", 12, 32, nullptr};
const KernelSpec kAmxBf16{"amx-bf16", 32, 32, nullptr};

struct Cpu {
  bool avx2_fma, avx512, avx512_bf16;
};

const Cpu& CpuHas() {
  static const Cpu cpu = [] {
    __builtin_cpu_init();
    Cpu c{};
    c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512 = __builtin_cpu_supports("avx512f");
    // matmul_bf16.cc packs with AVX-512 BW word permutes (every avx512bf16 CPU has BW; checked anyway).
    c.avx512_bf16 = c.avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
    return c;
  }();
  return cpu;
}

// AMX tiles for bf16: matmul_amx.cc packs with the same AVX-512 BW permutes, and the process must get
// the OS's leave. Asked at the first bf16 matmul, not with the CPU's other features: the leave grows
// every signal frame of every thread of the process by the tile state (~8 KiB), which a process that
// never multiplies bf16 (an fp32 run) has no reason to take on.
bool AmxBf16Usable() {
  static const bool ok = CpuHas().avx512 && __builtin_cpu_supports("avx512bw") && AmxUnusableReason() == nullptr;
  return ok;
}

// Process-global on purpose, not per env: the micro-kernel is a property of the
// process's CPU, read by every stream thread (setMatmulKernel is a test hook).
std::atomic<int> forced{static_cast<int>(MatmulKernelMode::kAuto)};

// The fp32 micro-kernel for this mode and CPU (a forced mode the CPU lacks falls back to the best it has).
const KernelSpec& SelectF32() {
  const Cpu& cpu = CpuHas();
  switch (static_cast<MatmulKernelMode>(forced.load(std::memory_order_relaxed))) {
    case MatmulKernelMode::kPortable: return kPortable;
    case MatmulKernelMode::kAvx2: return cpu.avx2_fma ? kAvx2 : kPortable;
    default: return cpu.avx512 ? kAvx512 : cpu.avx2_fma ? kAvx2 : kPortable;
  }
}

// bf16 inputs: AMX tiles when usable (auto / amx modes), else vdpbf16ps when the CPU has it (auto / amx /
// avx512 modes), else the fp32 kernel on converted values.
const KernelSpec& SelectBf16() {
  const auto mode = static_cast<MatmulKernelMode>(forced.load(std::memory_order_relaxed));
  const bool amx_mode = mode == MatmulKernelMode::kAuto || mode == MatmulKernelMode::kAmx;
  if (amx_mode && AmxBf16Usable()) return kAmxBf16;
  if ((amx_mode || mode == MatmulKernelMode::kAvx512) && CpuHas().avx512_bf16) return kAvx512Bf16;
  return SelectF32();
}


thread_local AlignedScratch a_scratch, b_scratch, c_scratch;

inline float ToF32(float v) { return v; }
inline float ToF32(uint16_t v) { return BF16ToF32(v); }

// fp32 packing. Ap[sliver][p][mr] = op(A)(i0 + sliver * mr + i, p0 + p), zero past row mc.
template <typename T>
void PackA(const T* a, bool trans, int64_t m, int64_t k, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int64_t MR, float* ap) {
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t mr = std::min(MR, mc - ir);
    if (trans) {
      const T* src = a + p0 * m + i0 + ir;
      for (int64_t p = 0; p < kc; ++p, src += m, ap += MR) {
        int64_t i = 0;
        for (; i < mr; ++i) ap[i] = ToF32(src[i]);
        for (; i < MR; ++i) ap[i] = 0.0f;
      }
    } else {
      for (int64_t i = 0; i < MR; ++i) {
        if (i < mr) {
          const T* src = a + (i0 + ir + i) * k + p0;
          for (int64_t p = 0; p < kc; ++p) ap[p * MR + i] = ToF32(src[p]);
        } else {
          for (int64_t p = 0; p < kc; ++p) ap[p * MR + i] = 0.0f;
        }
      }
      ap += kc * MR;
    }
  }
}

// Bp[sliver][p][nr] = op(B)(p0 + p, j0 + sliver * nr + j), zero past column nc.
template <typename T>
void PackB(const T* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t NR, float* bp) {
  if (!trans) {
    // Row by row so B is read sequentially; each row scatters one line per sliver.
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = b + (p0 + p) * n + j0;
      for (int64_t jr = 0; jr < nc; jr += NR) {
        float* dst = bp + jr * kc + p * NR;
        const int64_t nr = std::min(NR, nc - jr);
        int64_t j = 0;
        for (; j < nr; ++j) dst[j] = ToF32(src[jr + j]);
        for (; j < NR; ++j) dst[j] = 0.0f;
      }
    }
    return;
  }
  for (int64_t jr = 0; jr < nc; jr += NR) {
    float* dst = bp + jr * kc;
    const int64_t nr = std::min(NR, nc - jr);
    for (int64_t j = 0; j < NR; ++j) {
      if (j < nr) {
        const T* src = b + (j0 + jr + j) * k + p0;
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + j] = ToF32(src[p]);
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + j] = 0.0f;
      }
    }
  }
}

// C (fp32, row stride n) = op(A) . op(B) for one batch entry.
template <typename T>
void MatmulF32Out(const KernelSpec& ks, const T* a, const T* b, float* c, int64_t M, int64_t N, int64_t K, bool trans_a,
                  bool trans_b) {
  if (K == 0) {
    std::fill_n(c, static_cast<size_t>(M * N), 0.0f);
    return;
  }
  const int64_t MR = ks.mr, NR = ks.nr;
  // Equal MC blocks (whole slivers) instead of MC_MAX blocks plus a thin remainder.
  const int64_t m_blocks = (M + MC_MAX - 1) / MC_MAX;
  const int64_t mc_step = ((M + m_blocks - 1) / m_blocks + MR - 1) / MR * MR;
  const int64_t kc_max = std::min(KC, K);
  float* ap = a_scratch.Get<float>(static_cast<size_t>(mc_step * kc_max));
  float* bp = b_scratch.Get<float>(static_cast<size_t>((std::min(NC, N) + NR - 1) / NR * NR * kc_max));
  alignas(64) float tile[MAX_MR * MAX_NR];
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool accumulate = pc > 0;
      PackB(b, trans_b, N, K, pc, kc, jc, nc, NR, bp);
      for (int64_t ic = 0; ic < M; ic += mc_step) {
        const int64_t mc = std::min(mc_step, M - ic);
        PackA(a, trans_a, M, K, ic, mc, pc, kc, MR, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          const float* bs = bp + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min(MR, mc - ir);
            const float* as = ap + ir * kc;
            float* cij = c + (ic + ir) * N + (jc + jr);
            if (mr == MR && nr == NR) {
              ks.fn(kc, as, bs, cij, N, accumulate);
              continue;
            }
            ks.fn(kc, as, bs, tile, NR, false);
            for (int64_t i = 0; i < mr; ++i) {
              float* ci = cij + i * N;
              const float* ti = tile + i * NR;
              if (accumulate) {
                for (int64_t j = 0; j < nr; ++j) ci[j] += ti[j];
              } else {
                for (int64_t j = 0; j < nr; ++j) ci[j] = ti[j];
              }
            }
          }
        }
      }
    }
  }
}

// fp32 inputs on the AVX-512 kernel take the unpacked path (matmul_avx512.cc) unless every dim
// is >= 512: there packing A is paid back many times over and the packed path is tuned for it
// (rows of an unpacked A 4 KiB apart would fight over the same L1 sets). fp32 inputs on the AVX2
// kernel always go to matmul_avx2.cc, which packs A itself from 512 on (its vector packing and
// masked edge tiles beat this path's scalar packing and staging tile). The rest packs.
template <typename T>
void Out(const KernelSpec& ks, const T* a, const T* b, float* c, int64_t M, int64_t N, int64_t K, bool trans_a, bool trans_b) {
  if constexpr (std::is_same_v<T, float>) {
    if (&ks == &kAvx512 && std::min({M, N, K}) < 512) return MatmulF32Avx512(a, b, c, M, N, K, trans_a, trans_b);
    if (&ks == &kAvx2) return MatmulF32Avx2(a, b, c, M, N, K, trans_a, trans_b);
  } else {
    if (&ks == &kAmxBf16) return MatmulBf16Amx(a, b, c, M, N, K, trans_a, trans_b);
    if (&ks == &kAvx512Bf16) return MatmulBf16Avx512(a, b, c, M, N, K, trans_a, trans_b);
  }
  MatmulF32Out(ks, a, b, c, M, N, K, trans_a, trans_b);
}

template <typename T>
void MatmulTyped(const MatmulArgs& g, const KernelSpec& ks) {
  const int64_t M = g.m, N = g.n, K = g.k;
  const size_t mn = static_cast<size_t>(M * N);
  for (int64_t q = 0; q < g.batch; ++q) {
    const T* a = static_cast<const T*>(g.a) + q * M * K;
    const T* b = static_cast<const T*>(g.b) + q * K * N;
    if (g.out_dtype == DType::kF32) {
      Out(ks, a, b, static_cast<float*>(g.c) + q * M * N, M, N, K, g.trans_a, g.trans_b);
      continue;
    }
    float* c32 = c_scratch.Get<float>(mn);
    Out(ks, a, b, c32, M, N, K, g.trans_a, g.trans_b);
    uint16_t* out = static_cast<uint16_t*>(g.c) + q * M * N;
    for (size_t i = 0; i < mn; ++i) out[i] = F32ToBF16(c32[i]);
  }
  c_scratch.Trim(size_t{16} << 20);
}

}  // namespace

void SetMatmulKernelMode(MatmulKernelMode mode) { forced.store(static_cast<int>(mode)); }

const char* MatmulKernelName() { return SelectF32().name; }

const char* MatmulBf16KernelName() { return SelectBf16().name; }

bool VectorAvx2Allowed() {
  return CpuHas().avx2_fma && static_cast<MatmulKernelMode>(forced.load(std::memory_order_relaxed)) != MatmulKernelMode::kPortable;
}

bool VectorAvx512BwAllowed() {
  static const bool bw = CpuHas().avx512 && __builtin_cpu_supports("avx512bw");
  const auto mode = static_cast<MatmulKernelMode>(forced.load(std::memory_order_relaxed));
  return bw && mode != MatmulKernelMode::kPortable && mode != MatmulKernelMode::kAvx2;
}

void Matmul(const MatmulArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  if (g.in_dtype == DType::kBF16) {
    MatmulTyped<uint16_t>(g, SelectBf16());
  } else {
    MatmulTyped<float>(g, SelectF32());
  }
}

}  // namespace ascent::fast
