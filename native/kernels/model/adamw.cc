// AdamW (torch.optim.AdamW, decoupled weight decay, bias correction), in place:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

struct Coeffs {
  float decay, b1, c1, b2, c2, step_size, inv_bc2_sqrt, eps;
};

Coeffs Make(const AdamWArgs& a) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  return Coeffs{1.0f - a.lr * a.weight_decay, a.beta1, 1.0f - a.beta1, a.beta2, 1.0f - a.beta2,
                static_cast<float>(a.lr / bc1), static_cast<float>(1.0 / std::sqrt(bc2)), a.eps};
}

inline void Step(const Coeffs& c, float& p, float g, float& m, float& v) {
  p *= c.decay;
  m = c.b1 * m + c.c1 * g;
  v = c.b2 * v + c.c2 * g * g;
  p -= c.step_size * m / (std::sqrt(v) * c.inv_bc2_sqrt + c.eps);
}

__attribute__((target("avx2,fma"))) int64_t StepAvx2(const Coeffs& c, const AdamWArgs& a) {
  const __m256 decay = _mm256_set1_ps(c.decay), b1 = _mm256_set1_ps(c.b1), c1 = _mm256_set1_ps(c.c1);
  const __m256 b2 = _mm256_set1_ps(c.b2), c2 = _mm256_set1_ps(c.c2), ss = _mm256_set1_ps(c.step_size);
  const __m256 ib = _mm256_set1_ps(c.inv_bc2_sqrt), eps = _mm256_set1_ps(c.eps);
  int64_t i = 0;
  for (; i + 8 <= a.n; i += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(a.p + i), decay);
    __m256 g = _mm256_loadu_ps(a.g + i);
    __m256 m = _mm256_fmadd_ps(b1, _mm256_loadu_ps(a.m + i), _mm256_mul_ps(c1, g));
    __m256 v = _mm256_fmadd_ps(b2, _mm256_loadu_ps(a.v + i), _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
    __m256 den = _mm256_fmadd_ps(_mm256_sqrt_ps(v), ib, eps);
    p = _mm256_fnmadd_ps(ss, _mm256_div_ps(m, den), p);
    _mm256_storeu_ps(a.p + i, p);
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
  }
  return i;
}

}  // namespace

void ref::AdamW(const AdamWArgs& a) {
  const Coeffs c = Make(a);
  for (int64_t i = 0; i < a.n; ++i) Step(c, a.p[i], a.g[i], a.m[i], a.v[i]);
}

void fast::AdamW(const AdamWArgs& a) {
  const Coeffs c = Make(a);
  int64_t i = std::strcmp(Vec().name, "avx2-fma") == 0 ? StepAvx2(c, a) : 0;
  for (; i < a.n; ++i) Step(c, a.p[i], a.g[i], a.m[i], a.v[i]);
}

// One call per entry, so each tensor keeps the single kernel's split into vector body and
// scalar tail (bitwise one adamw op per tensor); the list only saves the per-op overhead.
void ref::AdamWMulti(const AdamWMultiArgs& a) {
  for (const AdamWArgs& e : a.list) ref::AdamW(e);
}

void fast::AdamWMulti(const AdamWMultiArgs& a) {
  for (const AdamWArgs& e : a.list) fast::AdamW(e);
}

}  // namespace ascent::model
