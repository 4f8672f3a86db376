// The fingerprint kernel (see fingerprint.h): one pass over the affine view. The inner
// dimension is walked in runs whose canonical indices share their high 32 bits, by a
// loop of 32-bit multiplies and xor-shifts that the compiler vectorizes (an AVX2 clone
// is picked at run time when the CPU has it).
#include "kernels/fingerprint.h"

#include <cstddef>

namespace ascent {
namespace {

// The murmur3 finalizer: a bijection of 32-bit words with full avalanche.
inline uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

// Contribution of value bits `v` at canonical index (hi, lo): the 64-bit word a·2^32 + b.
// For a fixed index v -> a is a bijection (odd multiplier, xor with a constant, Fmix32),
// so a changed value always changes a; a change of a cannot be cancelled by the low
// word mod 2^64 (|b' - b| < 2^32). Hence changing one element always changes the sum.
// b only widens the sum to 64 bits (one multiply; index products are strength-reduced
// by the compiler inside a run). Sums: Σ(a·2^32 + b) = (Σa mod 2^32)·2^32 + Σb mod 2^64,
// so a is summed in 32-bit lanes and only b is widened.
inline uint32_t MixA(uint32_t v, uint32_t lo, uint32_t hi) { return Fmix32((v * 0x9e3779b1u) ^ (lo * 0x85ebca77u) ^ (hi * 0xc2b2ae3du)); }
inline uint32_t MixB(uint32_t a, uint32_t lo) {
  uint32_t b = (a ^ (lo * 0x27d4eb2fu)) * 0x165667b1u;
  return b ^ (b >> 15);
}

// Sum over i < n of the contribution of src[i * ls] at (hi, lo0 + i * gs); the caller keeps lo0 + (n-1)·gs below 2^32.
template <bool kContiguous>
inline uint64_t RunSumT(const uint32_t* src, int64_t n, int64_t ls, uint32_t lo0, uint32_t gs, uint32_t hi) {
  uint32_t sa = 0;
  uint64_t sb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = kContiguous ? src[i] : src[i * ls];
    const uint32_t lo = lo0 + static_cast<uint32_t>(i) * gs;
    const uint32_t a = MixA(v, lo, hi);
    sa += a;
    sb += MixB(a, lo);
  }
  return (static_cast<uint64_t>(sa) << 32) + sb;
}

__attribute__((target("avx2"))) uint64_t RunSumAvx2(const uint32_t* src, int64_t n, uint32_t lo0, uint32_t gs, uint32_t hi) {
  return RunSumT<true>(src, n, 1, lo0, gs, hi);
}

uint64_t RunSum(const uint32_t* src, int64_t n, int64_t ls, uint64_t g0, int64_t gs) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  uint64_t sum = 0;
  while (n > 0) {
    // The longest prefix whose canonical indices keep the high word of g0.
    const uint64_t hi = g0 >> 32, room = (hi + 1) << 32;
    int64_t m = n;
    if (gs > 0) {
      const uint64_t fit = (room - g0 + static_cast<uint64_t>(gs) - 1) / static_cast<uint64_t>(gs);
      if (fit < static_cast<uint64_t>(m)) m = static_cast<int64_t>(fit);
    }
    const uint32_t lo = static_cast<uint32_t>(g0), h = static_cast<uint32_t>(hi), g32 = static_cast<uint32_t>(gs);
    if (ls == 1) sum += avx2 ? RunSumAvx2(src, m, lo, g32, h) : RunSumT<true>(src, m, 1, lo, g32, h);
    else sum += RunSumT<false>(src, m, ls, lo, g32, h);
    src += m * ls;
    g0 += static_cast<uint64_t>(m) * static_cast<uint64_t>(gs);
    n -= m;
  }
  return sum;
}

// One inner row: n elements from src (local stride ls) at canonical g0 + i·gs, restricted
// to g < limit and, with a period, to g mod period in [start, start + len).
uint64_t RowSum(const FingerprintArgs& a, const uint32_t* src, int64_t n, int64_t ls, uint64_t g0, int64_t gs) {
  if (gs > 0) {
    // Canonical indices grow along the row: cut it at `limit`.
    if (g0 >= a.limit) return 0;
    const uint64_t fit = (a.limit - g0 + static_cast<uint64_t>(gs) - 1) / static_cast<uint64_t>(gs);
    if (fit < static_cast<uint64_t>(n)) n = static_cast<int64_t>(fit);
  } else if (g0 >= a.limit) {
    return 0;
  }
  if (a.filter_period == 0) return RunSum(src, n, ls, g0, gs);
  const uint64_t P = a.filter_period, S = a.filter_start, L = a.filter_len;
  uint64_t sum = 0;
  if (gs == 1) {
    // Runs of the region inside the row: [k·P + S, k·P + S + L).
    int64_t i = 0;
    while (i < n) {
      const uint64_t g = g0 + static_cast<uint64_t>(i), m = g % P;
      if (m < S) {
        i += static_cast<int64_t>(S - m);
        continue;
      }
      if (m >= S + L) {
        i += static_cast<int64_t>(P - m);
        continue;
      }
      int64_t run = static_cast<int64_t>(S + L - m);
      if (run > n - i) run = n - i;
      sum += RunSum(src + i * ls, run, ls, g, 1);
      i += run;
    }
    return sum;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t g = g0 + static_cast<uint64_t>(i * gs);
    if (g % P - S < L) sum += RunSum(src + i * ls, 1, ls, g, 0);
  }
  return sum;
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
    sum += RowSum(a, a.src + lo, n, ls, static_cast<uint64_t>(go), gs);
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
