#include "kernels/fast.h"

#include "kernels/cast_vec.h"
#include "kernels/reference.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <memory>
#include <type_traits>
#include <vector>

namespace ascent::fast {
namespace {

template <typename Fn>
void DispatchFloat(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(DT<DType::kF32>{}); break;
    case DType::kBF16: fn(DT<DType::kBF16>{}); break;
    case DType::kF16: fn(DT<DType::kF16>{}); break;
    default: break;
  }
}

template <typename Fn>
void DispatchInt(DType t, Fn&& fn) {
  switch (t) {
    case DType::kI32: fn(DT<DType::kI32>{}); break;
    case DType::kI64: fn(DT<DType::kI64>{}); break;
    case DType::kU8: fn(DT<DType::kU8>{}); break;
    default: break;
  }
}

template <typename Fn>
void DispatchAll(DType t, Fn&& fn) {
  if (IsFloat(t)) {
    DispatchFloat(t, fn);
  } else {
    DispatchInt(t, fn);
  }
}

template <typename D>
inline constexpr bool kIsFloatTraits = std::is_same_v<D, DT<DType::kF32>> ||
                                       std::is_same_v<D, DT<DType::kBF16>> ||
                                       std::is_same_v<D, DT<DType::kF16>>;

// Typed element conversion with the same rules as StoreScalar(LoadScalar(...)).
template <typename S, typename D>
inline typename D::T ConvertOne(typename S::T v) {
  if constexpr (kIsFloatTraits<S> && kIsFloatTraits<D>) {
    return D::Store(S::Load(v));
  } else if constexpr (kIsFloatTraits<S>) {
    return SaturatingFloatToInt<typename D::T>(static_cast<double>(S::Load(v)));
  } else if constexpr (kIsFloatTraits<D>) {
    return D::Store(static_cast<float>(static_cast<int64_t>(v)));
  } else {
    return static_cast<typename D::T>(static_cast<int64_t>(v));
  }
}

template <typename D>
inline typename D::T FromDouble(double v) {
  if constexpr (kIsFloatTraits<D>) {
    return D::Store(static_cast<float>(v));
  } else {
    return SaturatingFloatToInt<typename D::T>(v);
  }
}

}  // namespace

void Fill(void* dst, DType t, size_t n, double value) {
  DispatchAll(t, [&](auto d) {
    using D = decltype(d);
    typename D::T v = FromDouble<D>(value);
    std::fill_n(static_cast<typename D::T*>(dst), n, v);
  });
}

void Arange(void* dst, DType t, size_t n, double start, double step) {
  DispatchAll(t, [&](auto d) {
    using D = decltype(d);
    auto* out = static_cast<typename D::T*>(dst);
    for (size_t i = 0; i < n; ++i) out[i] = FromDouble<D>(start + static_cast<double>(i) * step);
  });
}

void Cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
  if (CastVectorized(dst, dst_t, src, src_t, n)) return;
  DispatchAll(src_t, [&](auto s) {
    using S = decltype(s);
    DispatchAll(dst_t, [&](auto d) {
      using D = decltype(d);
      const auto* __restrict in = static_cast<const typename S::T*>(src);
      auto* __restrict out = static_cast<typename D::T*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = ConvertOne<S, D>(in[i]);
    });
  });
}

void Binary(BinaryOp op, DType t, void* out, const void* a, const void* b, size_t n) {
  if (IsFloat(t)) {
    DispatchFloat(t, [&](auto d) {
      using D = decltype(d);
      const auto* x = static_cast<const typename D::T*>(a);
      const auto* y = static_cast<const typename D::T*>(b);
      auto* o = static_cast<typename D::T*>(out);
      if (op == BinaryOp::kAdd) {
        for (size_t i = 0; i < n; ++i) o[i] = D::Store(D::Load(x[i]) + D::Load(y[i]));
      } else {
        for (size_t i = 0; i < n; ++i) o[i] = D::Store(D::Load(x[i]) * D::Load(y[i]));
      }
    });
    return;
  }
  DispatchInt(t, [&](auto d) {
    using D = decltype(d);
    using U = typename D::U;
    const auto* x = static_cast<const typename D::T*>(a);
    const auto* y = static_cast<const typename D::T*>(b);
    auto* o = static_cast<typename D::T*>(out);
    if (op == BinaryOp::kAdd) {
      for (size_t i = 0; i < n; ++i) o[i] = static_cast<typename D::T>(static_cast<U>(static_cast<U>(x[i]) + static_cast<U>(y[i])));
    } else {
      for (size_t i = 0; i < n; ++i) o[i] = static_cast<typename D::T>(static_cast<U>(static_cast<U>(x[i]) * static_cast<U>(y[i])));
    }
  });
}

void Scale(DType t, void* out, const void* x, size_t n, float alpha) {
  DispatchFloat(t, [&](auto d) {
    using D = decltype(d);
    const auto* in = static_cast<const typename D::T*>(x);
    auto* o = static_cast<typename D::T*>(out);
    for (size_t i = 0; i < n; ++i) o[i] = D::Store(D::Load(in[i]) * alpha);
  });
}

void Axpy(DType t, void* y, const void* x, size_t n, float alpha) {
  DispatchFloat(t, [&](auto d) {
    using D = decltype(d);
    const auto* in = static_cast<const typename D::T*>(x);
    auto* io = static_cast<typename D::T*>(y);
    for (size_t i = 0; i < n; ++i) {
      float ax = alpha * D::Load(in[i]);
      io[i] = D::Store(D::Load(io[i]) + ax);
    }
  });
}

namespace {

// Transposing reads: the innermost output dim is strided in the source while another
// output dim k is the source's contiguous one (the expert layout swap [E, A, B] -> [E, B, A],
// the fused-expert direct writes). Element by element that touches a new source cache line
// per element; here the (k, innermost) plane is walked in kTile x kTile tiles, so each tile's
// source and destination lines stay in L1 (kTile = 32: 4 KiB of fp32 per side).
// Returns false (nothing done) when the shape is not of that kind or too small to gain.
template <typename T>
bool PermuteTiled(const PermuteArgs& p) {
  constexpr int64_t kTile = 32;
  const size_t rank = p.shape.size();
  if (rank < 2 || p.src_strides[rank - 1] == 1) return false;
  int k = -1;
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (p.src_strides[d] == 1 && p.shape[d] > 1) {
      k = static_cast<int>(d);
      break;
    }
  }
  if (k < 0) return false;
  const int64_t R = p.shape[k], C = p.shape[rank - 1], cs = p.src_strides[rank - 1];
  if (R < 8 || C < 8) return false;
  // Destination strides of the contiguous output; dim k's and the other (outer) dims'.
  std::vector<int64_t> dst_strides(rank);
  int64_t acc = 1;
  for (size_t d = rank; d-- > 0;) {
    dst_strides[d] = acc;
    acc *= p.shape[d];
  }
  const int64_t rs = dst_strides[k];
  std::vector<size_t> od;
  for (size_t d = 0; d + 1 < rank; ++d) {
    if (static_cast<int>(d) != k) od.push_back(d);
  }
  const auto* src = static_cast<const T*>(p.src);
  auto* dst = static_cast<T*>(p.dst);
  size_t outer = 1;
  for (size_t d : od) outer *= static_cast<size_t>(p.shape[d]);
  std::vector<int64_t> idx(od.size(), 0);
  int64_t src_base = 0, dst_base = 0;
  for (size_t o = 0; o < outer; ++o) {
    for (int64_t r0 = 0; r0 < R; r0 += kTile) {
      const int64_t r1 = std::min(R, r0 + kTile);
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t c1 = std::min(C, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          const T* s = src + src_base + r;
          T* drow = dst + dst_base + r * rs;
          for (int64_t c = c0; c < c1; ++c) drow[c] = s[c * cs];
        }
      }
    }
    for (size_t j = od.size(); j-- > 0;) {
      const size_t d = od[j];
      if (++idx[j] < p.shape[d]) {
        src_base += p.src_strides[d];
        dst_base += dst_strides[d];
        break;
      }
      src_base -= (p.shape[d] - 1) * p.src_strides[d];
      dst_base -= (p.shape[d] - 1) * dst_strides[d];
      idx[j] = 0;
    }
  }
  return true;
}

template <typename T>
void PermuteTyped(const PermuteArgs& p) {
  if (PermuteTiled<T>(p)) return;
  const size_t rank = p.shape.size();
  const auto* src = static_cast<const T*>(p.src);
  auto* dst = static_cast<T*>(p.dst);
  const int64_t inner = p.shape[rank - 1];
  const int64_t inner_stride = p.src_strides[rank - 1];
  size_t outer = 1;
  for (size_t d = 0; d + 1 < rank; ++d) outer *= static_cast<size_t>(p.shape[d]);
  // Odometer over the outer dims; src_base tracks the source offset incrementally.
  std::vector<int64_t> idx(rank, 0);
  int64_t src_base = 0;
  for (size_t o = 0; o < outer; ++o) {
    const T* s = src + src_base;
    if (inner_stride == 1) {
      std::memcpy(dst, s, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = s[i * inner_stride];
    }
    dst += inner;
    for (size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < p.shape[d]) {
        src_base += p.src_strides[d];
        break;
      }
      src_base -= (p.shape[d] - 1) * p.src_strides[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

void Permute(const PermuteArgs& p) {
  for (int64_t s : p.shape) {
    if (s == 0) return;
  }
  if (p.shape.empty()) {
    std::memcpy(p.dst, p.src, p.elem_size);
    return;
  }
  switch (p.elem_size) {
    case 1: PermuteTyped<uint8_t>(p); break;
    case 2: PermuteTyped<uint16_t>(p); break;
    case 4: PermuteTyped<uint32_t>(p); break;
    case 8: PermuteTyped<uint64_t>(p); break;
    default: ref::Permute(p); break;
  }
}

}  // namespace ascent::fast
