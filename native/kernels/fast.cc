#include "kernels/fast.h"

#include "kernels/reference.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
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

template <typename T>
void PermuteTyped(const PermuteArgs& p) {
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

// ---- matmul -------------------------------------------------------------------
// Blocking (BLIS order): for each NC-wide column panel of B and KC-deep slice, pack
// B into NR-wide slivers; for each MC-tall block of A pack MR-tall slivers; the
// micro-kernel adds an MR x NR tile of C (fp32) from one A sliver and one B sliver.
// Packing converts bf16 to fp32 and zero-pads the edges, so the micro-kernel never
// branches on shape.
namespace {

constexpr int64_t MR = 6, NR = 16;
constexpr int64_t MC = 120, KC = 256, NC = 2048;

using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc);

void MicroKernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc) {
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < MR; ++i) {
      float av = a[p * MR + i];
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += av * b[p * NR + j];
    }
  }
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] += acc[i][j];
  }
}

__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const float* a, const float* b,
                                                        float* c, int64_t ldc) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b0 = _mm256_loadu_ps(b + p * NR);
    __m256 b1 = _mm256_loadu_ps(b + p * NR + 8);
    const float* ap = a + p * MR;
    __m256 av = _mm256_broadcast_ss(ap + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
  }
  __m256 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), rows[i][0]));
    _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), rows[i][1]));
  }
}

std::atomic<bool> force_portable{false};

MicroKernel SelectMicroKernel() {
  static const bool has_avx2_fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  if (has_avx2_fma && !force_portable.load(std::memory_order_relaxed)) return MicroKernelAvx2;
  return MicroKernelPortable;
}

inline float LoadF(const void* base, DType t, size_t idx) {
  if (t == DType::kBF16) return BF16ToF32(static_cast<const uint16_t*>(base)[idx]);
  return static_cast<const float*>(base)[idx];
}

// Ap[ir-sliver][p][MR]: element (i, p) of op(A) for rows i0.., depth p0..
void PackA(const MatmulArgs& g, size_t a0, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* ap) {
  for (int64_t ir = 0; ir < mc; ir += MR) {
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t i = 0; i < MR; ++i) {
        int64_t row = i0 + ir + i, col = p0 + p;
        float v = 0.0f;
        if (ir + i < mc) {
          v = LoadF(g.a, g.in_dtype, a0 + static_cast<size_t>(g.trans_a ? col * g.m + row : row * g.k + col));
        }
        *ap++ = v;
      }
    }
  }
}

// Bp[jr-sliver][p][NR]: element (p, j) of op(B).
void PackB(const MatmulArgs& g, size_t b0, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* bp) {
  for (int64_t jr = 0; jr < nc; jr += NR) {
    for (int64_t p = 0; p < kc; ++p) {
      int64_t row = p0 + p;
      for (int64_t j = 0; j < NR; ++j) {
        int64_t col = j0 + jr + j;
        float v = 0.0f;
        if (jr + j < nc) {
          v = LoadF(g.b, g.in_dtype, b0 + static_cast<size_t>(g.trans_b ? col * g.k + row : row * g.n + col));
        }
        *bp++ = v;
      }
    }
  }
}

}  // namespace

void SetForcePortable(bool force) { force_portable.store(force); }

const char* MatmulKernelName() { return SelectMicroKernel() == MicroKernelAvx2 ? "avx2-fma" : "portable"; }

void Matmul(const MatmulArgs& g) {
  const MicroKernel kernel = SelectMicroKernel();
  const int64_t M = g.m, N = g.n, K = g.k;
  std::vector<float> apack(static_cast<size_t>(MC * KC));
  std::vector<float> bpack(static_cast<size_t>(((std::min(NC, N) + NR - 1) / NR) * NR * KC));
  std::vector<float> c32_tmp;
  float tile[MR * NR];
  for (int64_t b = 0; b < g.batch; ++b) {
    size_t a0 = static_cast<size_t>(b * M * K), b0 = static_cast<size_t>(b * K * N);
    size_t c0 = static_cast<size_t>(b * M * N);
    float* c32;
    if (g.out_dtype == DType::kF32) {
      c32 = static_cast<float*>(g.c) + c0;
    } else {
      c32_tmp.assign(static_cast<size_t>(M * N), 0.0f);
      c32 = c32_tmp.data();
    }
    std::fill_n(c32, static_cast<size_t>(M * N), 0.0f);
    for (int64_t jc = 0; jc < N; jc += NC) {
      int64_t nc = std::min(NC, N - jc);
      for (int64_t pc = 0; pc < K; pc += KC) {
        int64_t kc = std::min(KC, K - pc);
        PackB(g, b0, pc, kc, jc, nc, bpack.data());
        for (int64_t ic = 0; ic < M; ic += MC) {
          int64_t mc = std::min(MC, M - ic);
          PackA(g, a0, ic, mc, pc, kc, apack.data());
          for (int64_t jr = 0; jr < nc; jr += NR) {
            int64_t nr = std::min(NR, nc - jr);
            const float* bs = bpack.data() + (jr / NR) * NR * kc;
            for (int64_t ir = 0; ir < mc; ir += MR) {
              int64_t mr = std::min(MR, mc - ir);
              const float* as = apack.data() + (ir / MR) * MR * kc;
              float* cij = c32 + (ic + ir) * N + (jc + jr);
              if (mr == MR && nr == NR) {
                kernel(kc, as, bs, cij, N);
              } else {
                std::fill_n(tile, MR * NR, 0.0f);
                kernel(kc, as, bs, tile, NR);
                for (int64_t i = 0; i < mr; ++i) {
                  for (int64_t j = 0; j < nr; ++j) cij[i * N + j] += tile[i * NR + j];
                }
              }
            }
          }
        }
      }
    }
    if (g.out_dtype == DType::kBF16) {
      auto* out = static_cast<uint16_t*>(g.c) + c0;
      for (size_t i = 0; i < static_cast<size_t>(M * N); ++i) out[i] = F32ToBF16(c32[i]);
    }
  }
}

}  // namespace ascent::fast
