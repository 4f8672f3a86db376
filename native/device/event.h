// Events order work across streams. record(stream) bumps `recorded` at enqueue time
// and the stream thread publishes that generation into `completed` (with a
// timestamp) when it reaches the record op. A wait captures the generation current
// at enqueue time and blocks its stream thread on `cv` until `completed` reaches it.
// A record its stream never runs (the stream failed earlier, or was destroyed) fails
// its generation instead: waiters wake and their op fails with the recording stream's
// error, so a stream waiting on a failed one fails fast instead of waiting forever.
#pragma once

#include <napi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "errors.h"

namespace ascent {

struct EventState {
  explicit EventState(int device_, uint64_t id_) : device(device_), id(id_) {}
  const int device;
  const uint64_t id;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // guarded by mu
  uint64_t completed = 0;  // guarded by mu
  uint64_t ran = 0;        // guarded by mu: the latest generation whose record op ran
  std::optional<ErrorInfo> failure;  // guarded by mu: why the latest failed record never ran
  std::chrono::steady_clock::time_point time;  // of the latest completion
  void Complete(uint64_t generation);
  // The record of `generation` will never run: its waiters wake and fail with `cause`.
  void Fail(uint64_t generation, const ErrorInfo& cause);
  // For a waiter of `generation` that woke: the error it fails with, if that record never ran.
  std::optional<ErrorInfo> FailureFor(uint64_t generation);
};

class EventWrap : public Napi::ObjectWrap<EventWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  static std::shared_ptr<EventState> FromValue(Napi::Value value, const char* what);
  explicit EventWrap(const Napi::CallbackInfo& info);  // new Event(deviceOrdinal)

 private:
  Napi::Value Query(const Napi::CallbackInfo& info);
  Napi::Value ElapsedTime(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetId(const Napi::CallbackInfo& info);
  Napi::Value GetRecorded(const Napi::CallbackInfo& info);

  std::shared_ptr<EventState> state_;
};

}  // namespace ascent
