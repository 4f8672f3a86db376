// Kernel-only matmul check and timing loop, outside the runtime (no enqueue, no output
// allocation), beside a single-threaded OpenBLAS sgemm in the same process:
//
//   g++ -std=c++17 -O3 -pthread -Inative bench/dev/matmul_kernel.cc native/kernels/fast.cc
//       native/kernels/reference.cc -ldl -o /tmp/matmul_kernel && /tmp/matmul_kernel [rounds]
//
// It first checks fast::Matmul against ref::Matmul on ragged shapes (all four
// transpose combinations), then prints GFLOP/s for square n = 64 ... 1024, best of
// `rounds` (default 5), fast and OpenBLAS interleaved so machine load hits both.
// The runtime numbers (`node dist/bench/main.js kernels`) add per-op costs on top.
// Not part of the addon: binding.gyp compiles native/ only.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/fast.h"
#include "kernels/reference.h"

using namespace ascent;
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  void* h = dlopen("libopenblas.so.0", RTLD_NOW);
  auto sgemm = h ? (SgemmFn)dlsym(h, "cblas_sgemm") : nullptr;
  if (!sgemm) {
    std::fprintf(stderr, "libopenblas.so.0 not found. HINT: apt-get install libopenblas0-serial\n");
    return 1;
  }
  if (auto set = (void (*)(int))dlsym(h, "openblas_set_num_threads")) set(1);
  // Parity on ragged shapes (C starts as garbage: the kernel must not read it), with
  // the dispatched micro-kernel and with the portable one.
  static const int kShapes[][3] = {{1, 1, 1},     {7, 13, 5},     {33, 17, 65},   {70, 130, 300}, {125, 19, 257},
                                   {256, 256, 256}, {131, 67, 513}, {6, 16, 9},    {200, 300, 100}, {97, 2100, 33}};
  int bad = 0;
  for (bool portable : {false, true}) {
    fast::SetForcePortable(portable);
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
            std::printf("MISMATCH %s m=%d n=%d k=%d transA=%d transB=%d at %d: fast %g ref %g\n", fast::MatmulKernelName(), m, n, k, ta, tb, i, C1[i], C2[i]);
            bad++;
            break;
          }
        }
      }
    }
  }
  fast::SetForcePortable(false);
  std::printf("parity %s (%s and portable micro-kernels)\n", bad ? "FAIL" : "ok", fast::MatmulKernelName());
  if (bad) {
    std::printf("HINT: compare with the same shapes in test/kernels.test.ts (npx vitest run test/kernels.test.ts).\n");
    return 1;
  }
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  for (int n : {64, 128, 256, 512, 1024}) {
    std::vector<float> A(n*n), B(n*n), C(n*n);
    for (auto& x : A) x = (rand() / (float)RAND_MAX - .5f);
    for (auto& x : B) x = (rand() / (float)RAND_MAX - .5f);
    double flops = 2.0*n*n*n; int reps = std::max(1, (int)(2e8/flops));
    double bf = 1e9, bb = 1e9;
    MatmulArgs g{DType::kF32, DType::kF32, A.data(), B.data(), C.data(), 1, n, n, n, false, false};
    for (int r = 0; r < rounds; r++) {
      double t0 = now(); for (int i = 0; i < reps; i++) fast::Matmul(g); bf = std::min(bf, (now()-t0)/reps);
      t0 = now(); for (int i = 0; i < reps; i++) sgemm(101,111,111,n,n,n,1.f,A.data(),n,B.data(),n,0.f,C.data(),n); bb = std::min(bb, (now()-t0)/reps);
    }
    printf("n=%5d fast %6.1f  blas %6.1f  ratio %.3f\n", n, flops/bf/1e9, flops/bb/1e9, bb/bf);
  }
}
