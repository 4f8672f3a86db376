#include "kernels/model/vec.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/fast.h"

namespace ascent::model {
namespace {

float DotPortable(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void AxpyPortable(float* y, float alpha, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

float MaxPortable(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float ExpSumPortable(const float* x, float scale, float shift, float* out, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float e = std::exp(scale * x[i] - shift);
    if (out) out[i] = e;
    s += e;
  }
  return s;
}

void ScalePortable(float* x, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void VecMatPortable(const float* coef, const float* m, int64_t ld, int64_t rows, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; ++c) out[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float a = coef[r];
    const float* row = m + r * ld;
    for (int64_t c = 0; c < cols; ++c) out[c] += a * row[c];
  }
}

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 inline float HSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

AVX2 inline __m256 Exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-88.3762626647949f);
  // NaN stays NaN: max/min return the second operand when one is NaN, so put x second.
  x = _mm256_min_ps(hi, x);
  x = _mm256_max_ps(lo, x);
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, z, x);
  y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
  e = _mm256_slli_epi32(e, 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

AVX2 float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = HSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

AVX2 void AxpyAvx2(float* y, float alpha, const float* x, int64_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

AVX2 float MaxAvx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

AVX2 float ExpSumAvx2(const float* x, float scale, float shift, float* out, int64_t n) {
  __m256 vs = _mm256_set1_ps(scale), vsh = _mm256_set1_ps(shift), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = Exp256(_mm256_fmsub_ps(vs, _mm256_loadu_ps(x + i), vsh));
    if (out) _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = HSum(acc);
  if (i < n) {
    float tmp[8] = {}, res[8];
    int64_t r = n - i;
    std::memcpy(tmp, x + i, static_cast<size_t>(r) * 4);
    _mm256_storeu_ps(res, Exp256(_mm256_fmsub_ps(vs, _mm256_loadu_ps(tmp), vsh)));
    for (int64_t j = 0; j < r; ++j) {
      if (out) out[i + j] = res[j];
      s += res[j];
    }
  }
  return s;
}

AVX2 void ScaleAvx2(float* x, float alpha, int64_t n) {
  __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] *= alpha;
}

// Column blocks of 32 held in four accumulators across all rows; the tail block
// goes through a zero-padded scratch row.
AVX2 void VecMatAvx2(const float* coef, const float* m, int64_t ld, int64_t rows, int64_t cols, float* out) {
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    const float* p = m + c;
    for (int64_t r = 0; r < rows; ++r, p += ld) {
      const __m256 k = _mm256_broadcast_ss(coef + r);
      a0 = _mm256_fmadd_ps(k, _mm256_loadu_ps(p), a0);
      a1 = _mm256_fmadd_ps(k, _mm256_loadu_ps(p + 8), a1);
      a2 = _mm256_fmadd_ps(k, _mm256_loadu_ps(p + 16), a2);
      a3 = _mm256_fmadd_ps(k, _mm256_loadu_ps(p + 24), a3);
    }
    _mm256_storeu_ps(out + c, a0);
    _mm256_storeu_ps(out + c + 8, a1);
    _mm256_storeu_ps(out + c + 16, a2);
    _mm256_storeu_ps(out + c + 24, a3);
  }
  for (; c + 8 <= cols; c += 8) {
    __m256 a0 = _mm256_setzero_ps();
    const float* p = m + c;
    for (int64_t r = 0; r < rows; ++r, p += ld) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(coef + r), _mm256_loadu_ps(p), a0);
    _mm256_storeu_ps(out + c, a0);
  }
  if (c < cols) {
    const int64_t rest = cols - c;
    float acc[8] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float a = coef[r];
      const float* p = m + r * ld + c;
      for (int64_t j = 0; j < rest; ++j) acc[j] += a * p[j];
    }
    for (int64_t j = 0; j < rest; ++j) out[c + j] = acc[j];
  }
}

#undef AVX2

const VecOps kPortable{"portable", DotPortable, AxpyPortable, MaxPortable, ExpSumPortable, ScalePortable, VecMatPortable};
const VecOps kAvx2{"avx2-fma", DotAvx2, AxpyAvx2, MaxAvx2, ExpSumAvx2, ScaleAvx2, VecMatAvx2};

}  // namespace

const VecOps& Vec() {
  // Not "the matmul kernel is avx2-fma": on an AVX-512 CPU that name is "avx512", and every
  // model kernel (attention, swiglu, softmax ...) ran the plain loops with std::exp.
  return fast::VectorAvx2Allowed() ? kAvx2 : kPortable;
}

void KernelError(std::string message, std::vector<Detail> details) {
  throw AscentException(ErrorInfo{kStreamError, std::move(message), std::move(details)});
}

}  // namespace ascent::model
