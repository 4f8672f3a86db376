// Design measurement, not the runtime: what back-to-back small allReduces would cost if a
// rank's stream thread did not wait for each one to finish before posting the next.
//
//   g++ -std=c++17 -O2 -pthread bench/dev/comm_runahead.cc -o /tmp/comm_runahead
//   /tmp/comm_runahead [ranks=16] [bytes=4096] [iters=2000] [window=32]
//
// Today (native/comm/collectives.cc) every rank sleeps in the arrival barrier of every
// collective it is not last to reach: 16 ranks on 2 cores cost ~15 futex sleeps and
// wake-ups per op, and the kernel's context switching is most of the op's CPU
// (`perf record` of native/bench/comm_floor.cc: finish_task_switch + try_to_wake_up ~55%).
// Here each rank posts op i into slot i % window and moves on; the last rank to arrive at
// op i builds it (in op order) into every rank's recv. A rank sleeps only when it is
// `window` ops ahead of the built ones, and then until half a window more is built, so it
// sleeps about 2 / window times per op. window = 1 is close to today's one sleep per op.
// What the runtime would need on top (why this is a prototype): a collective's completion,
// flight-recorder end and errors delivered after its build rather than when the stream
// moves on; a drain before any op that is not a small collective of the same group;
// deadlines on both waits; fingerprint checks and abort reports naming the op that failed.
#include <linux/futex.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

namespace {

void Wake(std::atomic<uint32_t>* w) { syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0); }

// Sleeps while *w == v (1 s cap: a prototype without deadlines must not hang forever).
void Sleep(std::atomic<uint32_t>* w, uint32_t v) {
  timespec ts{1, 0};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(w), FUTEX_WAIT_PRIVATE, v, &ts, nullptr, 0);
}

struct Posted {
  const float* send;
  float* recv;
};

}  // namespace

int main(int argc, char** argv) {
  const int P = argc > 1 ? atoi(argv[1]) : 16;
  const int n = (argc > 2 ? atoi(argv[2]) : 4096) / 4;
  const int iters = argc > 3 ? atoi(argv[3]) : 2000;
  const int window = argc > 4 ? atoi(argv[4]) : 32;
  const uint32_t half = std::max(1, window / 2);
  std::vector<std::vector<Posted>> slots(window, std::vector<Posted>(P));
  std::vector<std::atomic<uint32_t>> arrived(window);
  for (auto& a : arrived) a = 0;
  std::atomic<uint32_t> built{0};  // ops built, in order; the futex of builders waiting their turn
  std::atomic<uint32_t> turn_waiters{0};
  std::atomic<uint32_t> milestone{0};  // bumped every `half` builds: the futex of ranks ahead
  std::atomic<uint32_t> ahead_waiters{0};
  std::atomic<long> sleeps{0};
  std::vector<double> ends(iters);
  const auto t0 = Clock::now();

  auto wait_on = [&](std::atomic<uint32_t>* word, std::atomic<uint32_t>* waiters, uint32_t want) {
    while (built.load() < want) {
      waiters->fetch_add(1);
      const uint32_t w = word->load();
      if (built.load() < want) {
        Sleep(word, w);
        sleeps.fetch_add(1);
      }
      waiters->fetch_sub(1);
    }
  };

  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> send(n, static_cast<float>(r + 1)), recv(n), acc(n);
      for (int i = 0; i < iters; ++i) {
        // Slot i % window is free once op i - window is built; wait for a whole half window.
        if (i >= window && built.load() < static_cast<uint32_t>(i - window + 1)) {
          const uint32_t need = i - window + 1;
          wait_on(&milestone, &ahead_waiters, (need + half - 1) / half * half);
        }
        const int s = i % window;
        slots[s][r] = {send.data(), recv.data()};
        if (arrived[s].fetch_add(1) + 1 != static_cast<uint32_t>(P)) continue;
        arrived[s] = 0;
        wait_on(&built, &turn_waiters, i);  // op i - 1's result may be op i's input
        std::memcpy(acc.data(), slots[s][0].send, n * 4);
        for (int q = 1; q < P; ++q) {
          const float* x = slots[s][q].send;
          for (int k = 0; k < n; ++k) acc[k] += x[k];
        }
        for (int q = 0; q < P; ++q) std::memcpy(slots[s][q].recv, acc.data(), n * 4);
        ends[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        built.store(i + 1);
        if (turn_waiters.load()) Wake(&built);
        if ((i + 1) % half == 0 || i + 1 == iters) {
          milestone.fetch_add(1);
          if (ahead_waiters.load()) Wake(&milestone);
        }
      }
      wait_on(&milestone, &ahead_waiters, iters);
      if (recv[0] != static_cast<float>(P * (P + 1) / 2)) {
        std::fprintf(stderr, "rank %d: wrong sum %f\n", r, recv[0]);
        std::exit(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const double cpu = (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
  std::printf("window %d, %d ranks, %d B: wall %.1f us/op, cpu %.1f us/op, %.2f sleeps/op\n", window, P, n * 4,
              wall / iters, cpu / iters, static_cast<double>(sleeps.load()) / iters);
}
