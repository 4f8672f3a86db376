#include "comm/reduce.h"

#include <cstring>
#include <type_traits>

#include "comm/copy.h"

namespace ascent {
namespace comm {
namespace {

// Elements per block (32 KiB of fp32 accumulator, L1/L2-resident). Each pass reads
// a run of this many elements from each of 4 inputs: shorter runs over 16 inputs
// (2048 elements, 8 KiB) read memory ~10-15% slower (measured 64 MiB x 16
// reduceScatter, 2 threads: 78 -> 67 ms; the acc round trips stay in cache).
constexpr uint64_t kBlock = 8192;

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

template <DType D, RedOp R>
void ReduceT(uint8_t* const* outs, int nouts, bool streaming, const uint8_t* const* in_b, int n, uint64_t count,
             int divisor) {
  using T = typename DT<D>::T;
  constexpr bool kFloat = D == DType::kF32 || D == DType::kBF16 || D == DType::kF16;
  using A = std::conditional_t<kFloat, float, T>;
  const bool direct = nouts == 1 && !streaming;
  T* out = reinterpret_cast<T*>(outs[0]);
  A acc[kBlock];
  T staged[kBlock];
  for (uint64_t base = 0; base < count; base += kBlock) {
    const uint64_t m = count - base < kBlock ? count - base : kBlock;
    const T* first = reinterpret_cast<const T*>(in_b[0]) + base;
    for (uint64_t i = 0; i < m; ++i) acc[i] = Widen<D, A>(first[i]);
    // Four inputs per pass over the accumulator (same fold order, a quarter of the
    // accumulator traffic); then the remainder one by one.
    int k = 1;
    for (; k + 4 <= n; k += 4) {
      const T* s0 = reinterpret_cast<const T*>(in_b[k]) + base;
      const T* s1 = reinterpret_cast<const T*>(in_b[k + 1]) + base;
      const T* s2 = reinterpret_cast<const T*>(in_b[k + 2]) + base;
      const T* s3 = reinterpret_cast<const T*>(in_b[k + 3]) + base;
      for (uint64_t i = 0; i < m; ++i) {
        A a = acc[i];
        a = Combine<A, R>(a, Widen<D, A>(s0[i]));
        a = Combine<A, R>(a, Widen<D, A>(s1[i]));
        a = Combine<A, R>(a, Widen<D, A>(s2[i]));
        a = Combine<A, R>(a, Widen<D, A>(s3[i]));
        acc[i] = a;
      }
    }
    for (; k < n; ++k) {
      const T* src = reinterpret_cast<const T*>(in_b[k]) + base;
      for (uint64_t i = 0; i < m; ++i) acc[i] = Combine<A, R>(acc[i], Widen<D, A>(src[i]));
    }
    if constexpr (R == RedOp::kAvg) {
      if constexpr (kFloat) {
        const float d = static_cast<float>(divisor);
        for (uint64_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
      } else {
        const A d = static_cast<A>(divisor);
        for (uint64_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
      }
    }
    // Store: straight into the one output, or once into `staged` and from there
    // into every output (streaming stores for large outputs, see copy.h).
    T* dst = direct ? out + base : staged;
    if constexpr (kFloat && D != DType::kF32) {
      for (uint64_t i = 0; i < m; ++i) dst[i] = DT<D>::Store(acc[i]);
    } else {
      for (uint64_t i = 0; i < m; ++i) dst[i] = acc[i];
    }
    if (!direct) {
      const uint64_t off = base * sizeof(T), bytes = m * sizeof(T);
      for (int o = 0; o < nouts; ++o) {
        if (streaming) {
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
