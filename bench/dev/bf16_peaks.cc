// The instruction peaks behind the bf16 matmul's kernel choice, on one core: GFLOP/s of
//  - vfmadd231ps zmm (fp32 FMA, 32 flops), 24 independent accumulators;
//  - vdpbf16ps zmm (AVX-512 BF16 pairs, 64 flops), 24 independent accumulators;
//  - tdpbf16ps (AMX tiles, 16 x 16 x 32 x 2 = 16384 flops), 4 independent accumulator tiles;
// register / tile operands only (no memory traffic), best of `rounds` from per-thread CPU time.
// Where vdpbf16ps does not reach twice the FMA's flop rate, no AVX-512 BF16 kernel can beat
// fp32 by much, which is why bf16 inputs go to AMX (native/kernels/matmul_amx.cc) where usable.
//
//   g++ -std=c++17 -O3 -Inative bench/dev/bf16_peaks.cc native/kernels/matmul_amx.cc -o /tmp/bf16_peaks
//   /tmp/bf16_peaks [rounds=5]
//
// Not part of the addon: binding.gyp compiles native/ only.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/matmul_amx.h"

namespace {

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

#define ASCENT_R24(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define ASCENT_ZERO(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n\t"
#define ASCENT_FMA(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ASCENT_DPBF16(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define ASCENT_ZMM_CLOBBERS                                                                                                  \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", \
      "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31"

// Each loop iteration issues 24 instructions; returns the seconds `iters` iterations took.
__attribute__((target("avx512f,fma"))) double RunFma(long iters) {
  const double t0 = ThreadSeconds();
  asm volatile(ASCENT_R24(ASCENT_ZERO) ASCENT_ZERO(30) ASCENT_ZERO(31) "1:\n\t" ASCENT_R24(ASCENT_FMA) "dec %0\n\tjnz 1b"
               : "+r"(iters)::ASCENT_ZMM_CLOBBERS, "cc");
  return ThreadSeconds() - t0;
}

__attribute__((target("avx512f,avx512bf16"))) double RunDpbf16(long iters) {
  const double t0 = ThreadSeconds();
  asm volatile(ASCENT_R24(ASCENT_ZERO) ASCENT_ZERO(30) ASCENT_ZERO(31) "1:\n\t" ASCENT_R24(ASCENT_DPBF16) "dec %0\n\tjnz 1b"
               : "+r"(iters)::ASCENT_ZMM_CLOBBERS, "cc");
  return ThreadSeconds() - t0;
}

// Palette 1, tiles 0-7 all 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  unsigned char palette = 1, start_row = 0, reserved[14] = {};
  unsigned short colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  unsigned char rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Each iteration issues 4 tdpbf16ps into tiles 0-3 from tiles 4-7 (all zero).
double RunAmx(long iters) {
  TileConfig cfg;
  asm volatile("ldtilecfg %0" ::"m"(cfg));
  const double t0 = ThreadSeconds();
  asm volatile(
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tilezero %%tmm4\n\ttilezero %%tmm5\n\ttilezero %%tmm6\n\ttilezero %%tmm7\n\t"
      "1:\n\t"
      "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
      "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
      "dec %0\n\tjnz 1b"
      : "+r"(iters)::"cc");
  const double t = ThreadSeconds() - t0;
  asm volatile("tilerelease");
  return t;
}

// Best GFLOP/s of `rounds` runs of `iters` iterations doing `flops` each.
template <typename Fn>
double Best(Fn run, long iters, double flops, int rounds) {
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const double s = run(iters);
    if (s > 0) best = std::max(best, flops * static_cast<double>(iters) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  if (rounds < 1) {
    std::fprintf(stderr, "Expected a positive number of rounds but received \"%s\". Usage: bf16_peaks [rounds=5]\n", argv[1]);
    return 2;
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("the CPU lacks AVX-512F: nothing to compare\n");
    return 0;
  }
  const double fma = Best(RunFma, 20'000'000, 24 * 32.0, rounds);
  std::printf("vfmadd231ps zmm  %8.1f GFLOP/s\n", fma);
  if (__builtin_cpu_supports("avx512bf16")) {
    const double dp = Best(RunDpbf16, 10'000'000, 24 * 64.0, rounds);
    std::printf("vdpbf16ps zmm    %8.1f GFLOP/s  (%.2fx the FMA)\n", dp, dp / fma);
  } else {
    std::printf("vdpbf16ps zmm    -  (the CPU lacks AVX-512 BF16)\n");
  }
  if (const char* why = ascent::fast::AmxUnusableReason()) {
    std::printf("tdpbf16ps (AMX)  -  (%s)\n", why);
  } else {
    const double amx = Best(RunAmx, 2'000'000, 4 * 16384.0, rounds);
    std::printf("tdpbf16ps (AMX)  %8.1f GFLOP/s  (%.2fx the FMA)\n", amx, amx / fma);
  }
  return 0;
}
