#include "comm/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "comm/copy.h"

namespace ascent {
namespace comm {
namespace {

// Accumulator bytes per block (L2-resident: 512 KiB L2 per core here); each pass
// reads a run of kBlockBytes / sizeof(A) elements from each of its inputs. Measured
// on the 64 MiB x 16 reduceScatter kernel alone (2 threads, buffers 16 GiB apart as
// the device pools are): 32 KiB blocks 41.7 ms, 128 KiB 37-40 ms, 16 KiB 47-53 ms
// (noisy shared machine; longer runs per input help the hardware prefetcher).
constexpr uint64_t kBlockBytes = 128 * 1024;

// Accumulator bytes per block when the result goes to several outputs and one of them
// is also an input (in place allReduce): a block reads kManyBlockBytes / sizeof(A)
// elements of every input, and the in-place output is stored while its lines are still
// in L2 only if all P input runs fit there (16 x 32 KiB = 512 KiB of a 2 MiB L2).
// Measured (16 x 64 MiB, bench/dev/allreduce_place.cc, mover CPU ms per op, in place
// with plain stores): 32 KiB 118, 64 KiB 127, 128 KiB 140, 256 KiB 166. Out of place
// (streaming stores) the block size made no difference (133-140 ms from 32 to 256
// KiB), and keeps kBlockBytes.
#ifndef ASCENT_REDUCE_MANY_BLOCK_BYTES
#define ASCENT_REDUCE_MANY_BLOCK_BYTES (32 * 1024)
#endif
constexpr uint64_t kManyBlockBytes = ASCENT_REDUCE_MANY_BLOCK_BYTES;

// Inputs folded per pass over the accumulator.
constexpr int kGroup = 4;

template <typename A, RedOp R>
inline A Combine(A a, A b) {
  if constexpr (R == RedOp::kSum || R == RedOp::kAvg) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  } else if constexpr (R == RedOp::kProd) {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  } else if constexpr (R == RedOp::kMax) {
    return b > a ? b : a;
  } else {
    return b < a ? b : a;
  }
}

template <DType D, typename A>
inline A Widen(typename DT<D>::T v) {
  if constexpr (D == DType::kBF16 || D == DType::kF16) {
    return DT<D>::Load(v);
  } else {
    return static_cast<A>(v);
  }
}

template <DType D>
struct Types {
  using T = typename DT<D>::T;
  static constexpr bool kFloat = D == DType::kF32 || D == DType::kBF16 || D == DType::kF16;
  using A = std::conditional_t<kFloat, float, T>;
  // Elements of T in one 64-byte cache line: the unit every pass works in.
  static constexpr int kLine = 64 / sizeof(T);
};

// The last step of an element: avg's division, then the store conversion.
template <DType D, RedOp R>
inline typename Types<D>::T Finish(typename Types<D>::A a, int divisor) {
  using Ty = Types<D>;
  if constexpr (R == RedOp::kAvg) {
    if constexpr (Ty::kFloat) {
      a = a / static_cast<float>(divisor);
    } else {
      a = a / static_cast<typename Ty::A>(divisor);
    }
  }
  if constexpr (Ty::kFloat && D != DType::kF32) {
    return DT<D>::Store(a);
  } else {
    return a;
  }
}

// One 64-byte line of T into dst: streaming stores when `nt` (dst 16-byte aligned).
inline void StoreLine(uint8_t* dst, const uint8_t* line, bool nt) {
#if defined(__x86_64__)
  if (nt) {
    const __m128i* s = reinterpret_cast<const __m128i*>(line);
    __m128i* o = reinterpret_cast<__m128i*>(dst);
    _mm_stream_si128(o, _mm_load_si128(s));
    _mm_stream_si128(o + 1, _mm_load_si128(s + 1));
    _mm_stream_si128(o + 2, _mm_load_si128(s + 2));
    _mm_stream_si128(o + 3, _mm_load_si128(s + 3));
    return;
  }
#endif
  std::memcpy(dst, line, 64);
}

// One pass over `m` elements (a multiple of kLine) folding inputs s[0..NI) into the
// accumulator. kInit: s[0] starts the fold (first pass) instead of `acc`. `dst`
// null: the result goes back to `acc`; else it is finished and stored there (last
// pass). Works a whole cache line of every input at a time: with P inputs at the
// same offsets of buffers a power of two apart (device pools), interleaving narrow
// loads from all of them made the lines evict each other in L1 (AMD's linear-address
// way predictor), and each line came from L2 several times.
template <DType D, RedOp R, int NI, bool kInit>
void Pass(typename Types<D>::A* acc, const typename Types<D>::T* const* s, uint64_t m, uint8_t* dst, bool nt,
          int divisor) {
  using Ty = Types<D>;
  using A = typename Ty::A;
  using T = typename Ty::T;
  constexpr int L = Ty::kLine;
  for (uint64_t i = 0; i < m; i += L) {
    A v[L];
    if constexpr (kInit) {
      for (int j = 0; j < L; ++j) v[j] = Widen<D, A>(s[0][i + j]);
    } else {
      for (int j = 0; j < L; ++j) v[j] = acc[i + j];
    }
    for (int g = kInit ? 1 : 0; g < NI; ++g) {
      const T* src = s[g] + i;
      for (int j = 0; j < L; ++j) v[j] = Combine<A, R>(v[j], Widen<D, A>(src[j]));
    }
    if (dst == nullptr) {
      for (int j = 0; j < L; ++j) acc[i + j] = v[j];
    } else {
      alignas(64) T line[L];
      for (int j = 0; j < L; ++j) line[j] = Finish<D, R>(v[j], divisor);
      StoreLine(dst + i * sizeof(T), reinterpret_cast<const uint8_t*>(line), nt);
    }
  }
}

template <DType D, RedOp R>
void ReduceT(uint8_t* const* outs, int nouts, bool streaming, const uint8_t* const* in_b, int n, uint64_t count,
             int divisor) {
  using Ty = Types<D>;
  using T = typename Ty::T;
  using A = typename Ty::A;
  constexpr int L = Ty::kLine;
  constexpr uint64_t kBlock = kBlockBytes / sizeof(A);
  // One output: the last pass stores straight into it (streaming when asked and
  // aligned). Several: the block is staged once and copied into each output as one
  // run (a line at a time into P outputs would thrash the write-combining buffers).
  const bool direct = nouts == 1 && (!streaming || (reinterpret_cast<uintptr_t>(outs[0]) & 15) == 0);
  // Streaming stores only into outputs that are not also an input at the same offset:
  // an in-place output's block was just read, so its lines are in cache, and a
  // non-temporal store to a cached line has to evict it first. Measured (16 x 64 MiB
  // in place, mover CPU per op): streaming 155-170 ms, plain stores 117-142 ms; out of
  // place the other way round (streaming 133-140 ms, plain 196-207 ms: each plain
  // store first reads the line it overwrites).
  std::vector<bool> nt_out;  // several outputs only (no allocation on the one-output path)
  bool in_place = false;     // some output is an input: small blocks keep its lines in L2
  if (!direct) {
    for (int o = 0; o < nouts; ++o) {
      const bool input = std::find(in_b, in_b + n, outs[o]) != in_b + n;
      in_place = in_place || input;
      nt_out.push_back(streaming && !input);
    }
  }
  const uint64_t block = in_place ? kManyBlockBytes / sizeof(A) : kBlock;
  alignas(64) A acc[kBlock];
  alignas(64) T staged[kBlock];
  const T* s[kGroup];
  for (uint64_t base = 0; base < count; base += block) {
    const uint64_t m = count - base < block ? count - base : block;
    const uint64_t lines = m / L * L;  // elements in whole lines; the rest below
    uint8_t* dst = direct ? outs[0] + base * sizeof(T) : reinterpret_cast<uint8_t*>(staged);
    const bool nt = direct && streaming;
    auto at = [&](int k) { return reinterpret_cast<const T*>(in_b[k]) + base; };
    if (lines > 0) {
      // Folds in rank order: [0..3] then [4..7] ... (the remainder one by one).
      int k = 0;
      while (k < n) {
        const int g = n - k >= kGroup ? kGroup : 1;
        uint8_t* to = k + g == n ? dst : nullptr;
        for (int j = 0; j < g; ++j) s[j] = at(k + j);
        if (g == kGroup) {
          if (k == 0) {
            Pass<D, R, kGroup, true>(acc, s, lines, to, nt, divisor);
          } else {
            Pass<D, R, kGroup, false>(acc, s, lines, to, nt, divisor);
          }
        } else if (k == 0) {
          Pass<D, R, 1, true>(acc, s, lines, to, nt, divisor);
        } else {
          Pass<D, R, 1, false>(acc, s, lines, to, nt, divisor);
        }
        k += g;
      }
    }
    // The ragged end (< one line): element by element, same fold order.
    T* tail = reinterpret_cast<T*>(dst) + lines;
    for (uint64_t i = lines; i < m; ++i) {
      A a = Widen<D, A>(at(0)[i]);
      for (int k = 1; k < n; ++k) a = Combine<A, R>(a, Widen<D, A>(at(k)[i]));
      tail[i - lines] = Finish<D, R>(a, divisor);
    }
    if (!direct) {
      const uint64_t off = base * sizeof(T), bytes = m * sizeof(T);
      for (int o = 0; o < nouts; ++o) {
        if (nt_out[o]) {
          StreamCopy(outs[o] + off, reinterpret_cast<const uint8_t*>(staged), bytes);
        } else {
          std::memcpy(outs[o] + off, staged, bytes);
        }
      }
    }
  }
  if (streaming) StreamFence();
}

template <DType D>
void ReduceD(uint8_t* const* outs, int nouts, bool streaming, const uint8_t* const* in, int n, uint64_t count,
             RedOp op, int divisor) {
  switch (op) {
    case RedOp::kSum: return ReduceT<D, RedOp::kSum>(outs, nouts, streaming, in, n, count, divisor);
    case RedOp::kProd: return ReduceT<D, RedOp::kProd>(outs, nouts, streaming, in, n, count, divisor);
    case RedOp::kMax: return ReduceT<D, RedOp::kMax>(outs, nouts, streaming, in, n, count, divisor);
    case RedOp::kMin: return ReduceT<D, RedOp::kMin>(outs, nouts, streaming, in, n, count, divisor);
    case RedOp::kAvg: return ReduceT<D, RedOp::kAvg>(outs, nouts, streaming, in, n, count, divisor);
  }
}

}  // namespace

void ReduceToMany(uint8_t* const* outs, int nouts, bool streaming, const uint8_t* const* in, int n, uint64_t count,
                  DType dtype, RedOp op, int divisor) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32: return ReduceD<DType::kF32>(outs, nouts, streaming, in, n, count, op, divisor);
    case DType::kBF16: return ReduceD<DType::kBF16>(outs, nouts, streaming, in, n, count, op, divisor);
    case DType::kF16: return ReduceD<DType::kF16>(outs, nouts, streaming, in, n, count, op, divisor);
    case DType::kI32: return ReduceD<DType::kI32>(outs, nouts, streaming, in, n, count, op, divisor);
    case DType::kI64: return ReduceD<DType::kI64>(outs, nouts, streaming, in, n, count, op, divisor);
    case DType::kU8: return ReduceD<DType::kU8>(outs, nouts, streaming, in, n, count, op, divisor);
  }
}

void Reduce(uint8_t* out, const uint8_t* const* in, int n, uint64_t count, DType dtype, RedOp op, int divisor) {
  ReduceToMany(&out, 1, false, in, n, count, dtype, op, divisor);
}

}  // namespace comm
}  // namespace ascent
