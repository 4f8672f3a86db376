// Bulk copy for collectives. Large copies (>= kStreamingBytes) use non-temporal
// stores: the destination is far bigger than the caches and is not read again by
// this thread soon, so skipping the read-for-ownership of every destination line
// saves a third of the memory traffic of a plain memcpy at these sizes.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ascent {
namespace comm {

inline constexpr uint64_t kStreamingBytes = 1 << 20;

// Streaming stores for the 64-byte-aligned middle of [dst, dst+n), plain copies
// for the ends. Call StreamFence() before publishing the data (next barrier).
inline void StreamCopy(uint8_t* dst, const uint8_t* src, uint64_t n) {
#if defined(__x86_64__)
  uint64_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  const uint64_t blocks = n / 64;
  for (uint64_t i = 0; i < blocks; ++i) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src + i * 64);
    __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2), d = _mm_loadu_si128(s + 3);
    __m128i* o = reinterpret_cast<__m128i*>(dst + i * 64);
    _mm_stream_si128(o, a);
    _mm_stream_si128(o + 1, b);
    _mm_stream_si128(o + 2, c);
    _mm_stream_si128(o + 3, d);
  }
  std::memcpy(dst + blocks * 64, src + blocks * 64, n - blocks * 64);
#else
  std::memcpy(dst, src, n);
#endif
}

// Streaming stores are weakly ordered: fence before the barrier that publishes them.
inline void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

inline void BulkCopy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  if (n >= kStreamingBytes) {
    StreamCopy(dst, src, n);
    StreamFence();
  } else if (n) {
    std::memcpy(dst, src, n);
  }
}

// Bytes of the source copied to every destination before moving on: small enough to
// stay in L1 while it is re-read for each destination, so the source is read from
// memory once however many destinations there are.
inline constexpr uint64_t kFanBlock = 32 * 1024;

// Copies [src, src+n) to each of `dsts` (n bytes each), block by block; a
// destination equal to `src` (in place) is skipped. `streaming`: non-temporal stores,
// fenced before returning.
inline void CopyToMany(uint8_t* const* dsts, int ndsts, const uint8_t* src, uint64_t n, bool streaming) {
  for (uint64_t base = 0; base < n; base += kFanBlock) {
    const uint64_t m = n - base < kFanBlock ? n - base : kFanBlock;
    for (int o = 0; o < ndsts; ++o) {
      if (dsts[o] == src) continue;
      if (streaming) {
        StreamCopy(dsts[o] + base, src + base, m);
      } else {
        std::memcpy(dsts[o] + base, src + base, m);
      }
    }
  }
  if (streaming) StreamFence();
}

}  // namespace comm
}  // namespace ascent
