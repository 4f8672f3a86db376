// Errors with stable codes. Native code throws AscentException (plain C++, usable on
// any thread); at the JS boundary it becomes the registered JS class for its code,
// built by the per-env factory (errorFromCode), so `instanceof` and `code` hold.
#pragma once

#include <napi.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace ascent {

inline constexpr const char* kInvalidArgument = "ASCENT_INVALID_ARGUMENT";
inline constexpr const char* kDeviceOOM = "ASCENT_DEVICE_OOM";
inline constexpr const char* kStreamError = "ASCENT_STREAM_ERROR";
inline constexpr const char* kTimeout = "ASCENT_TIMEOUT";
// Communicators (native/comm/): constructed on stream threads, surfaced through completions.
inline constexpr const char* kCollectiveMismatch = "ASCENT_COLLECTIVE_MISMATCH";
inline constexpr const char* kCollectiveTimeout = "ASCENT_COLLECTIVE_TIMEOUT";
inline constexpr const char* kCommAborted = "ASCENT_COMM_ABORTED";
inline constexpr const char* kP2PDeadlock = "ASCENT_P2P_DEADLOCK";

// One `details` entry of a JS error: a number, a string, or (is_list) an array of
// integers (rank lists such as culpritWorldRanks).
struct Detail {
  std::string key;
  bool is_num;
  double num;
  std::string str;
  bool is_list = false;
  std::vector<int> list;
};

inline Detail Num(std::string key, double v) { return Detail{std::move(key), true, v, {}, false, {}}; }
inline Detail Str(std::string key, std::string v) { return Detail{std::move(key), false, 0, std::move(v), false, {}}; }
inline Detail Ints(std::string key, std::vector<int> v) { return Detail{std::move(key), false, 0, {}, true, std::move(v)}; }

struct ErrorInfo {
  std::string code;
  std::string message;
  std::vector<Detail> details;

  // The detail `key`, or null.
  const Detail* Find(const std::string& key) const {
    for (const Detail& d : details) {
      if (d.key == key) return &d;
    }
    return nullptr;
  }
};

class AscentException : public std::exception {
 public:
  explicit AscentException(ErrorInfo info) : info_(std::move(info)) {}
  const char* what() const noexcept override { return info_.message.c_str(); }
  const ErrorInfo& info() const { return info_; }

 private:
  ErrorInfo info_;
};

[[noreturn]] void ThrowInvalidArgument(std::string message, std::vector<Detail> details = {});

// "2.00 GiB", "512.00 MiB", "64 B".
std::string FormatBytes(uint64_t bytes);

// Builds the JS error object for `info` through the env's factory (falls back to a
// plain Error carrying `code` when the factory is not installed yet).
Napi::Value MakeJsError(Napi::Env env, const ErrorInfo& info);

// Runs `fn`, turning AscentException into the JS error of its class.
template <typename Fn>
auto Guard(Napi::Env env, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const AscentException& e) {
    throw Napi::Error(env, MakeJsError(env, e.info()));
  }
}

}  // namespace ascent
