// fp32 <-> bf16 casts in vector registers. The scalar loop of fast::Cast rounds one element
// at a time through F32ToBF16's branch (NaN test, then round to nearest even), which GCC does
// not vectorise: a 128 MiB fp32 embedding took ~50 ms to cast to bf16 for the weight sync,
// ~2.5 GB/s where the copy bandwidth is ~10 GB/s. These loops compute the same bits with
// integer lane operations, 16 (AVX-512) or 16 as two 8-lane halves (AVX2) per step:
//   NaN (|u| > 0x7f800000)  -> (u >> 16) | 0x0040        (quiet, sign and payload kept)
//   otherwise               -> (u + 0x7fff + ((u >> 16) & 1)) >> 16  (round to nearest even)
// so they agree with F32ToBF16 bit for bit (denormals are kept, not flushed as vcvtneps2bf16
// does). bf16 -> fp32 is a widening shift. The tail goes through the scalar conversions.
#include "kernels/cast_vec.h"

#include <immintrin.h>

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/fast.h"

namespace ascent::fast {
namespace {

#define ASCENT_AVX512BW __attribute__((target("avx512f,avx512bw")))
#define ASCENT_AVX2 __attribute__((target("avx2")))

// (GCC 12 flags the undefined pass-through vector inside its own shift and widen intrinsics.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
ASCENT_AVX512BW inline __m256i RoundToBf16x16(__m512i u) {
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x0040));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

ASCENT_AVX512BW void F32ToBf16Avx512(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = RoundToBf16x16(_mm512_loadu_si512(in + i));
    const __m256i b = RoundToBf16x16(_mm512_loadu_si512(in + i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16), b);
  }
  for (; i < n; ++i) out[i] = F32ToBF16(in[i]);
}

ASCENT_AVX512BW void Bf16ToF32Avx512(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(w, 16));
  }
  for (; i < n; ++i) out[i] = BF16ToF32(in[i]);
}

#pragma GCC diagnostic pop

// 8 lanes; the results are < 0x10000, so packus (signed 32 -> unsigned 16) keeps them as they are.
ASCENT_AVX2 inline __m256i RoundToBf16x8(__m256i u) {
  // |u| and 0x7f800000 are non-negative as signed 32-bit integers: a signed compare is exact.
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

ASCENT_AVX2 void F32ToBf16Avx2(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = RoundToBf16x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    const __m256i b = RoundToBf16x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
    // packus interleaves 128-bit lanes (a0 b0 a1 b1): put them back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = F32ToBF16(in[i]);
}

ASCENT_AVX2 void Bf16ToF32Avx2(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; ++i) out[i] = BF16ToF32(in[i]);
}

}  // namespace

bool CastVectorized(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
  const bool to_bf16 = src_t == DType::kF32 && dst_t == DType::kBF16;
  const bool from_bf16 = src_t == DType::kBF16 && dst_t == DType::kF32;
  if (!to_bf16 && !from_bf16) return false;
  if (VectorAvx512BwAllowed()) {
    if (to_bf16) F32ToBf16Avx512(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n);
    else Bf16ToF32Avx512(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
    return true;
  }
  if (VectorAvx2Allowed()) {
    if (to_bf16) F32ToBf16Avx2(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n);
    else Bf16ToF32Avx2(static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
    return true;
  }
  return false;
}

}  // namespace ascent::fast
