// Futex wait / wake on a 32-bit atomic word (Linux). Every blocking wait in the
// communicator layer goes through WaitWord: at most a brief spin (kSpin pauses),
// then the kernel, bounded by a deadline. There are often more threads than cores
// (16 ranks = 32 threads on 2 cores), so a waiter must never burn its core while its
// peers need it: groups that oversubscribe the machine do not spin at all
// (measured: a 16-rank barrier on 2 cores took 390 us with a 100-pause spin, 238 us
// without).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace ascent {

// device/stream.h: posts the completions the calling stream thread holds back.
void FlushStreamCompletions();

namespace comm {

using Clock = std::chrono::steady_clock;

inline constexpr int kSpin = 100;

// A wait longer than this first posts the completions its stream thread holds back
// (device/stream.h, "Batched completions"): a host awaiting an earlier op then hears of
// it although this op still waits, e.g. for a peer whose progress depends on that host.
// Longer than a small collective's usual wait here (0.1-0.5 ms on 16 ranks under load), so
// back-to-back collectives still post one run of completions.
inline constexpr auto kFlushGrace = std::chrono::milliseconds(2);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be a plain 32-bit int");

inline void FutexWake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Blocks while *word == expected, until woken or the deadline passes. Returns false
// only when the deadline passed; spurious wake-ups return true (callers re-check).
inline bool FutexWait(std::atomic<uint32_t>* word, uint32_t expected, Clock::time_point deadline) {
  auto now = Clock::now();
  if (now >= deadline) return false;
  auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
  // Cap a single sleep so a lost wake-up (there should be none) costs at most 1 s.
  if (left > 1000000000LL) left = 1000000000LL;
  timespec ts{static_cast<time_t>(left / 1000000000LL), static_cast<long>(left % 1000000000LL)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
  return Clock::now() < deadline || word->load(std::memory_order_acquire) != expected;
}

// Waits until done() is true. `word` is the futex the wakers bump after changing
// the state done() reads. Returns false on deadline (done() still false).
template <typename Done>
bool WaitWord(std::atomic<uint32_t>* word, Clock::time_point deadline, int spin, Done&& done) {
  for (int i = 0; i < spin; ++i) {
    if (done()) return true;
    CpuRelax();
  }
  const Clock::time_point grace = Clock::now() + kFlushGrace;
  bool flushed = false;
  for (;;) {
    uint32_t w = word->load(std::memory_order_acquire);
    if (done()) return true;
    if (!flushed) {
      if (!FutexWait(word, w, std::min(deadline, grace))) {
        if (Clock::now() >= deadline) return done();
        FlushStreamCompletions();
        flushed = true;
      }
      continue;
    }
    if (!FutexWait(word, w, deadline)) return done();
  }
}

inline void Bump(std::atomic<uint32_t>* word) {
  word->fetch_add(1, std::memory_order_acq_rel);
  FutexWake(word);
}

}  // namespace comm
}  // namespace ascent
