// Kernel-only matmul check and timing loop, outside the runtime (no enqueue, no output
// allocation), beside a single-threaded OpenBLAS sgemm in the same process:
//
//   g++ -std=c++17 -O3 -pthread -Inative bench/dev/matmul_kernel.cc native/kernels/fast.cc
//       native/kernels/matmul*.cc native/kernels/reference.cc -ldl -o /tmp/matmul_kernel
//   /tmp/matmul_kernel [rounds=5] [outputs=1] [n ...]
//   MATMUL_KERNEL_FAST_ONLY=1 perf record /tmp/matmul_kernel 60 1 512   (no parity check, no
//   OpenBLAS: a profile of the fast kernel alone, e.g. its packing against its tiles)
//
// It first checks fast::Matmul against ref::Matmul on ragged shapes (all four transpose
// combinations, with the auto-selected and the portable micro-kernels), then prints GFLOP/s
// for square n (default 64 ... 1024) from per-thread CPU time (a shared machine's load moves
// it less than wall time), best of `rounds`, fast and OpenBLAS interleaved. `outputs` > 1
// cycles C through that many buffers, as the kernels bench does (each op there writes a fresh
// output tensor, so C is not in L1/L2), for both kernels. The runtime numbers (`npm run bench
// -- kernels`) add per-op dispatch on top. Not part of the addon: binding.gyp compiles native/ only.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/fast.h"
#include "kernels/reference.h"

using namespace ascent;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);

static double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int Parity() {
  static const int kShapes[][3] = {{1, 1, 1},       {7, 13, 5},     {33, 17, 65}, {70, 130, 300},  {125, 19, 257},
                                   {256, 256, 256}, {131, 67, 513}, {6, 16, 9},   {200, 300, 100}, {97, 2100, 33},
                                   {64, 64, 64},    {512, 520, 530}};
  int bad = 0;
  for (auto mode : {fast::MatmulKernelMode::kAuto, fast::MatmulKernelMode::kPortable}) {
    fast::SetMatmulKernelMode(mode);
    for (const auto& s : kShapes) {
      const int m = s[0], n = s[1], k = s[2];
      for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2;
        std::vector<float> A(m * k), B(k * n), C1(m * n, 7.0f), C2(m * n);
        for (auto& x : A) x = rand() / static_cast<float>(RAND_MAX) - 0.5f;
        for (auto& x : B) x = rand() / static_cast<float>(RAND_MAX) - 0.5f;
        MatmulArgs g{DType::kF32, DType::kF32, A.data(), B.data(), C1.data(), 1, m, n, k, ta, tb};
        fast::Matmul(g);
        g.c = C2.data();
        ref::Matmul(g);
        for (int i = 0; i < m * n; i++) {
          if (std::fabs(C1[i] - C2[i]) > 1e-4 * std::sqrt(k)) {
            std::printf("MISMATCH %s m=%d n=%d k=%d transA=%d transB=%d at %d: fast %g ref %g\n", fast::MatmulKernelName(), m, n,
                        k, ta, tb, i, C1[i], C2[i]);
            bad++;
            break;
          }
        }
      }
    }
  }
  fast::SetMatmulKernelMode(fast::MatmulKernelMode::kAuto);
  return bad;
}

int main(int argc, char** argv) {
  void* h = dlopen("libopenblas.so.0", RTLD_NOW);
  auto sgemm = h ? reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm")) : nullptr;
  if (!sgemm) {
    std::fprintf(stderr, "libopenblas.so.0 not found. HINT: apt-get install libopenblas0-serial\n");
    return 1;
  }
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"))) set(1);
  const bool fast_only = std::getenv("MATMUL_KERNEL_FAST_ONLY") != nullptr;
  if (!fast_only) {
    const int bad = Parity();
    std::printf("parity %s (%s and portable micro-kernels)\n", bad ? "FAIL" : "ok", fast::MatmulKernelName());
    if (bad) return 1;
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int outputs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  std::vector<int> sizes;
  for (int i = 3; i < argc; i++) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {64, 96, 128, 192, 256, 512, 1024};
  for (int n : sizes) {
    std::vector<float> A(n * n), B(n * n), C(static_cast<size_t>(n) * n * outputs);
    for (auto& x : A) x = rand() / static_cast<float>(RAND_MAX) - .5f;
    for (auto& x : B) x = rand() / static_cast<float>(RAND_MAX) - .5f;
    const double flops = 2.0 * n * n * n;
    const int reps = std::max(1, static_cast<int>(2e8 / flops));
    double bf = 1e9, bb = 1e9;
    for (int r = 0; r < rounds; r++) {
      double t0 = CpuNow();
      for (int i = 0; i < reps; i++) {
        MatmulArgs g{DType::kF32, DType::kF32, A.data(), B.data(), C.data() + static_cast<size_t>(i % outputs) * n * n, 1, n, n, n, false, false};
        fast::Matmul(g);
      }
      bf = std::min(bf, (CpuNow() - t0) / reps);
      if (fast_only) continue;
      t0 = CpuNow();
      for (int i = 0; i < reps; i++) sgemm(101, 111, 111, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data() + static_cast<size_t>(i % outputs) * n * n, n);
      bb = std::min(bb, (CpuNow() - t0) / reps);
    }
    std::printf("n=%5d fast %6.1f  blas %6.1f GFLOP/s  ratio %.3f  (fast %.2f us)\n", n, flops / bf / 1e9, flops / bb / 1e9, bb / bf, bf * 1e6);
  }
}
