// Element types and the scalar conversions every kernel shares. Conversions to
// bf16/fp16 go through fp32 and round to nearest even; NaN stays NaN (quiet).
// Float -> integer truncates toward zero and saturates (NaN -> 0); integer ->
// integer wraps like a C cast. Reference and fast kernels use these same helpers,
// so elementwise results agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace ascent {

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3, kI64 = 4, kU8 = 5 };
inline constexpr int kNumDTypes = 6;

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "fp32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kU8: return "uint8";
  }
  return "?";
}

inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float BF16ToF32(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBF16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return BitsFloat(FloatBits(f) | sign);
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t F32ToF16(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: fp16 subnormal, units of 2^-24
    float scaled = BitsFloat(a) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  a += 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent by -112, round to nearest even
  return static_cast<uint16_t>(sign | (a >> 13));
}

template <typename I>
inline I SaturatingFloatToInt(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

// Storage types and fp32 load/store for each dtype (compile-time dispatch).
template <DType D> struct DT;
template <> struct DT<DType::kF32> {
  using T = float;
  static float Load(T v) { return v; }
  static T Store(float v) { return v; }
};
template <> struct DT<DType::kBF16> {
  using T = uint16_t;
  static float Load(T v) { return BF16ToF32(v); }
  static T Store(float v) { return F32ToBF16(v); }
};
template <> struct DT<DType::kF16> {
  using T = uint16_t;
  static float Load(T v) { return F16ToF32(v); }
  static T Store(float v) { return F32ToF16(v); }
};
template <> struct DT<DType::kI32> { using T = int32_t; using U = uint32_t; };
template <> struct DT<DType::kI64> { using T = int64_t; using U = uint64_t; };
template <> struct DT<DType::kU8> { using T = uint8_t; using U = uint8_t; };

// Runtime-dispatched scalar access, for reference kernels. A scalar is either an
// exact integer or a double holding the exact fp value.
struct Scalar {
  bool is_int;
  int64_t i;
  double d;
};

inline Scalar LoadScalar(const void* base, DType t, size_t idx) {
  switch (t) {
    case DType::kF32: return {false, 0, static_cast<const float*>(base)[idx]};
    case DType::kBF16: return {false, 0, BF16ToF32(static_cast<const uint16_t*>(base)[idx])};
    case DType::kF16: return {false, 0, F16ToF32(static_cast<const uint16_t*>(base)[idx])};
    case DType::kI32: return {true, static_cast<const int32_t*>(base)[idx], 0};
    case DType::kI64: return {true, static_cast<const int64_t*>(base)[idx], 0};
    case DType::kU8: return {true, static_cast<const uint8_t*>(base)[idx], 0};
  }
  return {true, 0, 0};
}

inline float ScalarToF32(const Scalar& s) {
  return s.is_int ? static_cast<float>(s.i) : static_cast<float>(s.d);
}

template <typename I>
inline I ScalarToInt(const Scalar& s) {
  return s.is_int ? static_cast<I>(s.i) : SaturatingFloatToInt<I>(s.d);
}

inline void StoreScalar(void* base, DType t, size_t idx, const Scalar& s) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[idx] = ScalarToF32(s); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[idx] = F32ToBF16(ScalarToF32(s)); break;
    case DType::kF16: static_cast<uint16_t*>(base)[idx] = F32ToF16(ScalarToF32(s)); break;
    case DType::kI32: static_cast<int32_t*>(base)[idx] = ScalarToInt<int32_t>(s); break;
    case DType::kI64: static_cast<int64_t*>(base)[idx] = ScalarToInt<int64_t>(s); break;
    case DType::kU8: static_cast<uint8_t*>(base)[idx] = ScalarToInt<uint8_t>(s); break;
  }
}

}  // namespace ascent
