// Design measurement, not the runtime: the large allReduce's data movement alone
// (native/comm/reduce.cc ReduceToMany, claimed in chunks by as many mover threads as
// the runtime uses), out of place against in place, on buffers laid out as the device
// pools lay them out (one 16 GiB MAP_NORESERVE arena per rank, skewed by 4160 bytes per
// ordinal, MADV_HUGEPAGE unless hp=0; in place: one buffer, out of place: send at
// offset 0 and recv right after it, as the bench allocates them).
//
//   g++ -std=c++17 -O3 -pthread -Inative bench/dev/allreduce_place.cc native/comm/reduce.cc -o /tmp/arp
//   /tmp/arp [mib=64] [ranks=16] [iters=10] [movers=2] [hp=1] [mode=both|in|out|copy] [nt=1]
//
// Prints the median op time and mover CPU time of each placement, alternated op by op,
// and how much of the buffers THP backs (AnonHugePages before and after touching them).
// nt=0 asks ReduceToMany for plain stores everywhere; nt=1 for streaming stores (which
// it makes only into outputs that are not also an input). mode=copy: every rank's send
// streamed into its recv, the same bytes read and written with no reduction (the floor).
// The mover CPU time is the figure to compare on a shared machine: wall time moves with
// the load (2 movers on 2 cores often get one core between them).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/copy.h"
#include "comm/reduce.h"

using namespace ascent;

namespace {

long AnonHugeKiB() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

struct Rank {
  uint8_t* base;
  uint8_t* send;
  uint8_t* recv;
};

double ThreadCpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Movers' CPU seconds of the last Run (summed over the threads): on a shared machine the
// wall time moves with the load, the CPU time a mover spends on its chunks much less.
double g_cpu = 0;

// One allReduce: `movers` threads claim 16 chunks each, as RunMovers does.
bool g_nt = true;
bool g_copy = false;  // mode=copy: send -> recv of every rank, the out-of-place floor  // streaming (non-temporal) stores into the outputs, as the runtime makes them

double Run(std::vector<Rank>& r, bool in_place, uint64_t count, int movers) {
  const int P = static_cast<int>(r.size());
  const uint64_t n = static_cast<uint64_t>(movers) * 16, align = 16;
  std::atomic<uint64_t> next{0};
  std::atomic<double> cpu{0};
  auto t0 = std::chrono::steady_clock::now();
  auto work = [&] {
    const double c0 = ThreadCpu();
    std::vector<const uint8_t*> in(P);
    std::vector<uint8_t*> out(P);
    for (uint64_t k = next.fetch_add(1); k < n; k = next.fetch_add(1)) {
      uint64_t per = (count + n - 1) / n;
      per = (per + align - 1) / align * align;
      const uint64_t lo = std::min(count, k * per), hi = std::min(count, lo + per);
      if (lo >= hi) continue;
      for (int q = 0; q < P; ++q) {
        in[q] = r[q].send + lo * 4;
        out[q] = (in_place ? r[q].send : r[q].recv) + lo * 4;
      }
      if (g_copy) {
        // The floor: the same bytes read and written as a plain streaming copy, no reduction.
        for (int q = 0; q < P; ++q) comm::StreamCopy(r[q].recv + lo * 4, in[q], (hi - lo) * 4);
        comm::StreamFence();
      } else {
        comm::ReduceToMany(out.data(), P, g_nt, in.data(), P, hi - lo, DType::kF32, comm::RedOp::kSum, P);
      }
    }
    double c = cpu.load();
    while (!cpu.compare_exchange_weak(c, c + ThreadCpu() - c0)) {
    }
  };
  std::vector<std::thread> th;
  for (int m = 1; m < movers; ++m) th.emplace_back(work);
  work();
  for (auto& t : th) t.join();
  g_cpu = cpu.load();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Fill(std::vector<Rank>& r, uint64_t count) {
  for (size_t q = 0; q < r.size(); ++q) {
    float* s = reinterpret_cast<float*>(r[q].send);
    for (uint64_t i = 0; i < count; ++i) s[i] = static_cast<float>(q + 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t mib = argc > 1 ? std::atoll(argv[1]) : 64;
  const int P = argc > 2 ? std::atoi(argv[2]) : 16;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 10;
  const int movers = argc > 4 ? std::atoi(argv[4]) : 2;
  const bool hp = argc > 5 ? std::atoi(argv[5]) != 0 : true;
  const std::string mode = argc > 6 ? argv[6] : "both";
  g_copy = mode == "copy";
  g_nt = argc > 7 ? std::atoi(argv[7]) != 0 : true;
  const uint64_t bytes = mib << 20, count = bytes / 4, arena = 16ull << 30;
  std::vector<Rank> r(P);
  for (int q = 0; q < P; ++q) {
    const uint64_t skew = static_cast<uint64_t>(q % 64) * 4160;
    void* p = mmap(nullptr, arena + skew, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return std::perror("mmap"), 1;
    if (hp) madvise(p, arena + skew, MADV_HUGEPAGE);
    r[q].base = static_cast<uint8_t*>(p) + skew;
    r[q].send = r[q].base;
    r[q].recv = r[q].base + bytes;
  }
  const long h0 = AnonHugeKiB();
  Fill(r, count);
  for (int q = 0; q < P; ++q) std::memset(r[q].recv, 0, bytes);
  std::printf("AnonHugePages: %ld KiB before, %ld KiB after touching %d x 2 x %llu MiB\n", h0, AnonHugeKiB(), P,
              static_cast<unsigned long long>(mib));
  std::vector<double> tin, tout, cin, cout;
  for (int i = 0; i < iters; ++i) {
    if (mode != "in") tout.push_back(Run(r, false, count, movers)), cout.push_back(g_cpu);
    if (mode == "both" || mode == "in") tin.push_back(Run(r, true, count, movers)), cin.push_back(g_cpu);
  }
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2] * 1e3;
  };
  if (g_copy) {
    std::printf("copy %.1f ms (cpu %.1f ms), medians of %d\n", med(tout), med(cout), iters);
    return 0;
  }
  Fill(r, count);
  Run(r, mode != "out", count, movers);
  // Check: every output of a fresh op holds the rank-order sum.
  const float want = static_cast<float>(P) * (P + 1) / 2;
  for (int q = 0; q < P; ++q) {
    const float* o = reinterpret_cast<const float*>(mode != "out" ? r[q].send : r[q].recv);
    for (uint64_t i = 0; i < count; i += 997) {
      if (o[i] != want) return std::fprintf(stderr, "wrong: rank %d [%llu] = %g\n", q, (unsigned long long)i, o[i]), 1;
    }
  }
  std::printf("%llu MiB x %d ranks, %d movers, hp=%d, nt=%d, medians of %d: out of place %.1f ms (cpu %.1f ms), in place "
              "%.1f ms (cpu %.1f ms)\n",
              static_cast<unsigned long long>(mib), P, movers, hp, g_nt, iters, med(tout), med(cout), med(tin), med(cin));
  return 0;
}
