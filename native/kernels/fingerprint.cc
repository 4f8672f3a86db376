// The fingerprint kernel (see fingerprint.h): one pass over the affine view, the
// innermost dimension in a tight loop.
#include "kernels/fingerprint.h"

#include <cstddef>

namespace ascent {
namespace {

// The splitmix64 finalizer: a bijection of 64-bit words with full avalanche.
inline uint64_t Fmix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// For a fixed index, bits -> Mix is a bijection (an odd multiplier is invertible mod 2^64,
// xor with a constant and Fmix are bijections), so changing one value always changes
// the sum; the index enters through its own odd multiplier.
inline uint64_t Mix(uint64_t index, uint32_t bits) {
  return Fmix((index * 0x9e3779b97f4a7c15ULL) ^ (static_cast<uint64_t>(bits) * 0xd6e8feb86659fd93ULL));
}

}  // namespace

void Fingerprint(const FingerprintArgs& a) {
  const std::size_t rank = a.shape.size();
  for (int64_t d : a.shape) {
    if (d == 0) return;
  }
  const int64_t n = rank ? a.shape[rank - 1] : 1;
  const int64_t ls = rank ? a.local_strides[rank - 1] : 0, gs = rank ? a.global_strides[rank - 1] : 0;
  std::vector<int64_t> idx(rank, 0);
  uint64_t sum = 0;
  for (;;) {
    int64_t lo = 0, go = a.global_offset;
    for (std::size_t d = 0; d + 1 < rank; ++d) {
      lo += idx[d] * a.local_strides[d];
      go += idx[d] * a.global_strides[d];
    }
    const uint32_t* s = a.src + lo;
    if (a.filter_period == 0) {
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t g = static_cast<uint64_t>(go + i * gs);
        if (g < a.limit) sum += Mix(g, s[i * ls]);
      }
    } else if (gs == 1) {
      // Contiguous canonical indices: the position in the period advances by one (no division per element).
      uint64_t m = static_cast<uint64_t>(go) % a.filter_period;
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t g = static_cast<uint64_t>(go + i);
        if (g < a.limit && m - a.filter_start < a.filter_len) sum += Mix(g, s[i * ls]);
        if (++m == a.filter_period) m = 0;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t g = static_cast<uint64_t>(go + i * gs);
        if (g < a.limit && g % a.filter_period - a.filter_start < a.filter_len) sum += Mix(g, s[i * ls]);
      }
    }
    // Next index over the outer dims (odometer).
    std::size_t d = rank > 0 ? rank - 1 : 0;
    for (;;) {
      if (d == 0) {
        *a.out += sum;
        return;
      }
      --d;
      if (++idx[d] < a.shape[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace ascent
