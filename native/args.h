// Argument readers for the native entry points. TS validates every argument with
// precise messages first; these are the safety net that keeps a bad call from
// reaching a kernel, and they throw InvalidArgument (never crash).
#pragma once

#include <napi.h>

#include <cmath>
#include <string>

#include "errors.h"
#include "kernels/dtype.h"

namespace ascent {

inline Napi::Value Arg(const Napi::CallbackInfo& info, size_t i) {
  return i < info.Length() ? info[i] : info.Env().Undefined();
}

inline double ArgNumber(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsNumber()) ThrowInvalidArgument(std::string("Expected a number for ") + name + ".", {Str("argument", name)});
  return v.As<Napi::Number>().DoubleValue();
}

// Non-negative safe integer.
inline uint64_t ArgIndex(const Napi::CallbackInfo& info, size_t i, const char* name) {
  double d = ArgNumber(info, i, name);
  if (!(d >= 0) || d > 9007199254740991.0 || std::floor(d) != d) {
    ThrowInvalidArgument(std::string("Expected a non-negative integer for ") + name + " but received " +
                             std::to_string(d) + ".",
                         {Str("argument", name), Num("value", d)});
  }
  return static_cast<uint64_t>(d);
}

inline bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsBoolean()) ThrowInvalidArgument(std::string("Expected a boolean for ") + name + ".", {Str("argument", name)});
  return v.As<Napi::Boolean>().Value();
}

inline DType ArgDType(const Napi::CallbackInfo& info, size_t i, const char* name) {
  uint64_t v = ArgIndex(info, i, name);
  if (v >= static_cast<uint64_t>(kNumDTypes)) {
    ThrowInvalidArgument(std::string("Unknown dtype code for ") + name + ".", {Str("argument", name), Num("value", static_cast<double>(v))});
  }
  return static_cast<DType>(v);
}

// 0: fast, 1: reference.
inline bool ArgUseReference(const Napi::CallbackInfo& info, size_t i) {
  uint64_t v = ArgIndex(info, i, "impl");
  if (v > 1) ThrowInvalidArgument("Expected impl 0 (fast) or 1 (reference).");
  return v == 1;
}

inline uint64_t ArgToken(const Napi::CallbackInfo& info, size_t i) { return ArgIndex(info, i, "token"); }

}  // namespace ascent
