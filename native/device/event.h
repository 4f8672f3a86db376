// Events order work across streams. record(stream) bumps `recorded` at enqueue time
// and the stream thread publishes that generation into `completed` (with a
// timestamp) when it reaches the record op. A wait captures the generation current
// at enqueue time and blocks its stream thread on `cv` until `completed` reaches it.
#pragma once

#include <napi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace ascent {

struct EventState {
  explicit EventState(int device_, uint64_t id_) : device(device_), id(id_) {}
  const int device;
  const uint64_t id;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // guarded by mu
  uint64_t completed = 0;  // guarded by mu
  std::chrono::steady_clock::time_point time;  // of the latest completion
  void Complete(uint64_t generation);
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
