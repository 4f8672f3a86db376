#include "kernels/fast.h"

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

// ---- matmul -------------------------------------------------------------------
// Blocking (BLIS order): for each NC-wide column panel of B and KC-deep slice, pack
// B into NR-wide slivers; for each MC-tall block of A pack MR-tall slivers; the
// micro-kernel computes an MR x NR tile of C (fp32) from one A sliver and one B
// sliver, held in 12 ymm accumulators. Packing converts bf16 to fp32 and zero-pads
// the edges, so the micro-kernel never branches on shape.
//
// Invariants:
//  - the first KC slice stores into C and later slices accumulate, so C is never
//    zeroed in a separate pass (and its old contents never matter: beta = 0);
//  - packed buffers are thread_local scratch, 64-byte aligned, grown on demand and
//    reused across calls: a matmul allocates nothing in the steady state (a fresh
//    vector per call cost ~10 us of zeroing at n = 64 and page faults at n >= 256);
//  - a B sliver row (NR floats) is exactly one cache line, so it is loaded aligned.
namespace {

constexpr int64_t MR = 6, NR = 16;
// KC x NR B sliver (16 KiB) stays in L1; MC x KC A block (<= 144 KiB) in L2;
// KC x NC B panel (2 MiB) in L3.
constexpr int64_t KC = 256, MC_MAX = 144, NC = 2048;
static_assert(MC_MAX % MR == 0 && NC % NR == 0, "blocks are whole slivers");

// c[i * ldc + j] (=|+=) sum_p a[p * MR + i] * b[p * NR + j] for the full MR x NR tile.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);

void MicroKernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t i = 0; i < MR; ++i) {
      float av = a[p * MR + i];
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += av * b[p * NR + j];
    }
  }
  for (int64_t i = 0; i < MR; ++i) {
    for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const float* a, const float* b,
                                                        float* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
  }
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b0 = _mm256_load_ps(b + p * NR);
    __m256 b1 = _mm256_load_ps(b + p * NR + 8);
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
    if (accumulate) {
      rows[i][0] = _mm256_add_ps(_mm256_loadu_ps(ci), rows[i][0]);
      rows[i][1] = _mm256_add_ps(_mm256_loadu_ps(ci + 8), rows[i][1]);
    }
    _mm256_storeu_ps(ci, rows[i][0]);
    _mm256_storeu_ps(ci + 8, rows[i][1]);
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

// One growable, 64-byte aligned float buffer per thread and role; freed at thread exit.
class Scratch {
 public:
  ~Scratch() { std::free(p_); }
  float* Get(size_t n) {
    if (n > cap_) {
      std::free(p_);
      size_t bytes = (n * sizeof(float) + 63) & ~size_t{63};
      p_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (p_ == nullptr) throw std::bad_alloc();
      cap_ = bytes / sizeof(float);
    }
    return p_;
  }
  // Frees the buffer when it holds more than `keep` floats, so a one-off large
  // staging buffer (fp32 accumulation of a big bf16 output) is not kept per thread.
  void Trim(size_t keep) {
    if (cap_ > keep) {
      std::free(p_);
      p_ = nullptr;
      cap_ = 0;
    }
  }

 private:
  float* p_ = nullptr;
  size_t cap_ = 0;
};

thread_local Scratch a_scratch, b_scratch, c_scratch;

inline float ToF32(float v) { return v; }
inline float ToF32(uint16_t v) { return BF16ToF32(v); }

// Ap[sliver][p][MR] = op(A)(i0 + sliver * MR + i, p0 + p), zero past row mc.
// op(A)(r, c) is a[r * k + c], or a[c * m + r] when transposed.
template <typename T>
void PackA(const T* a, bool trans, int64_t m, int64_t k, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* ap) {
  for (int64_t ir = 0; ir < mc; ir += MR) {
    const int64_t mr = std::min(MR, mc - ir);
    if (trans) {
      const T* src = a + p0 * m + i0 + ir;
      for (int64_t p = 0; p < kc; ++p, src += m, ap += MR) {
        int64_t i = 0;
        for (; i < mr; ++i) ap[i] = ToF32(src[i]);
        for (; i < MR; ++i) ap[i] = 0.0f;
      }
    } else {
      for (int64_t i = 0; i < MR; ++i) {
        if (i < mr) {
          const T* src = a + (i0 + ir + i) * k + p0;
          for (int64_t p = 0; p < kc; ++p) ap[p * MR + i] = ToF32(src[p]);
        } else {
          for (int64_t p = 0; p < kc; ++p) ap[p * MR + i] = 0.0f;
        }
      }
      ap += kc * MR;
    }
  }
}

// Bp[sliver][p][NR] = op(B)(p0 + p, j0 + sliver * NR + j), zero past column nc.
// op(B)(r, c) is b[r * n + c], or b[c * k + r] when transposed.
template <typename T>
void PackB(const T* b, bool trans, int64_t n, int64_t k, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* bp) {
  if (!trans) {
    // Row by row so B is read sequentially; each row scatters one line per sliver.
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = b + (p0 + p) * n + j0;
      for (int64_t jr = 0; jr < nc; jr += NR) {
        float* dst = bp + jr * kc + p * NR;
        const int64_t nr = std::min(NR, nc - jr);
        int64_t j = 0;
        for (; j < nr; ++j) dst[j] = ToF32(src[jr + j]);
        for (; j < NR; ++j) dst[j] = 0.0f;
      }
    }
    return;
  }
  for (int64_t jr = 0; jr < nc; jr += NR) {
    float* dst = bp + jr * kc;
    const int64_t nr = std::min(NR, nc - jr);
    for (int64_t j = 0; j < NR; ++j) {
      if (j < nr) {
        const T* src = b + (j0 + jr + j) * k + p0;
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + j] = ToF32(src[p]);
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * NR + j] = 0.0f;
      }
    }
  }
}

// C (fp32, row stride n) = op(A) . op(B) for one batch entry.
template <typename T>
void MatmulF32Out(MicroKernel kernel, const T* a, const T* b, float* c, int64_t M, int64_t N, int64_t K,
                  bool trans_a, bool trans_b) {
  if (K == 0) {
    std::fill_n(c, static_cast<size_t>(M * N), 0.0f);
    return;
  }
  // Equal MC blocks (whole slivers) instead of MC_MAX blocks plus a thin remainder.
  const int64_t m_blocks = (M + MC_MAX - 1) / MC_MAX;
  const int64_t mc_step = ((M + m_blocks - 1) / m_blocks + MR - 1) / MR * MR;
  float* ap = a_scratch.Get(static_cast<size_t>(mc_step * std::min(KC, K)));
  float* bp = b_scratch.Get(static_cast<size_t>((std::min(NC, N) + NR - 1) / NR * NR * std::min(KC, K)));
  alignas(64) float tile[MR * NR];
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = std::min(KC, K - pc);
      const bool accumulate = pc > 0;
      PackB(b, trans_b, N, K, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < M; ic += mc_step) {
        const int64_t mc = std::min(mc_step, M - ic);
        PackA(a, trans_a, M, K, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nr = std::min(NR, nc - jr);
          const float* bs = bp + jr * kc;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int64_t mr = std::min(MR, mc - ir);
            const float* as = ap + ir * kc;
            float* cij = c + (ic + ir) * N + (jc + jr);
            if (mr == MR && nr == NR) {
              kernel(kc, as, bs, cij, N, accumulate);
              continue;
            }
            kernel(kc, as, bs, tile, NR, false);
            for (int64_t i = 0; i < mr; ++i) {
              float* ci = cij + i * N;
              const float* ti = tile + i * NR;
              if (accumulate) {
                for (int64_t j = 0; j < nr; ++j) ci[j] += ti[j];
              } else {
                for (int64_t j = 0; j < nr; ++j) ci[j] = ti[j];
              }
            }
          }
        }
      }
    }
  }
}

template <typename T>
void MatmulTyped(const MatmulArgs& g, MicroKernel kernel) {
  const int64_t M = g.m, N = g.n, K = g.k;
  const size_t mn = static_cast<size_t>(M * N);
  for (int64_t q = 0; q < g.batch; ++q) {
    const T* a = static_cast<const T*>(g.a) + q * M * K;
    const T* b = static_cast<const T*>(g.b) + q * K * N;
    if (g.out_dtype == DType::kF32) {
      MatmulF32Out(kernel, a, b, static_cast<float*>(g.c) + q * M * N, M, N, K, g.trans_a, g.trans_b);
      continue;
    }
    float* c32 = c_scratch.Get(mn);
    MatmulF32Out(kernel, a, b, c32, M, N, K, g.trans_a, g.trans_b);
    uint16_t* out = static_cast<uint16_t*>(g.c) + q * M * N;
    for (size_t i = 0; i < mn; ++i) out[i] = F32ToBF16(c32[i]);
  }
  c_scratch.Trim(size_t{4} << 20);  // 16 MiB
}

}  // namespace

void SetForcePortable(bool force) { force_portable.store(force); }

const char* MatmulKernelName() { return SelectMicroKernel() == MicroKernelAvx2 ? "avx2-fma" : "portable"; }

void Matmul(const MatmulArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const MicroKernel kernel = SelectMicroKernel();
  if (g.in_dtype == DType::kBF16) {
    MatmulTyped<uint16_t>(g, kernel);
  } else {
    MatmulTyped<float>(g, kernel);
  }
}

}  // namespace ascent::fast
