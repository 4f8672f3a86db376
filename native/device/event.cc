#include "device/event.h"

#include <string>

#include "device/registry.h"
#include "errors.h"
#include "type_tags.h"

namespace ascent {

void EventState::Complete(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (generation > completed) completed = generation;
    if (generation > ran) ran = generation;
    time = std::chrono::steady_clock::now();
  }
  cv.notify_all();
}

void EventState::Fail(uint64_t generation, const ErrorInfo& cause) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (generation > completed) completed = generation;
    failure = cause;
  }
  cv.notify_all();
}

std::optional<ErrorInfo> EventState::FailureFor(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu);
  // A later record that ran supersedes a failed one (a wait orders after the latest record).
  if (ran >= generation || !failure) return std::nullopt;
  return failure;
}

Napi::Function EventWrap::Define(Napi::Env env) {
  return DefineClass(env, "Event",
                     {InstanceMethod<&EventWrap::Query>("query"),
                      InstanceMethod<&EventWrap::ElapsedTime>("elapsedTime"),
                      InstanceAccessor<&EventWrap::GetDevice>("device"),
                      InstanceAccessor<&EventWrap::GetId>("id"),
                      InstanceAccessor<&EventWrap::GetRecorded>("recorded")});
}

std::shared_ptr<EventState> EventWrap::FromValue(Napi::Value value, const char* what) {
  if (!HasTypeTag(value, kEventTag)) {
    ThrowInvalidArgument(std::string("Expected a device Event for ") + what + ".", {Str("argument", what)});
  }
  return Napi::ObjectWrap<EventWrap>::Unwrap(value.As<Napi::Object>())->state_;
}

EventWrap::EventWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EventWrap>(info) {
  info.This().As<Napi::Object>().TypeTag(&kEventTag);
  Guard(info.Env(), [&] {
    if (info.Length() < 1 || !info[0].IsNumber()) ThrowInvalidArgument("Expected a device ordinal for new Event().");
    int device = info[0].As<Napi::Number>().Int32Value();
    if (device < 0 || device >= Registry::kMaxDevices) ThrowInvalidArgument("Invalid device ordinal for Event.");
    state_ = std::make_shared<EventState>(device, Registry::Get().NextId());
  });
}

Napi::Value EventWrap::Query(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return Napi::Boolean::New(info.Env(), state_->completed >= state_->recorded);
}

// elapsedTime(end): milliseconds from this event's completion to `end`'s.
Napi::Value EventWrap::ElapsedTime(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    std::shared_ptr<EventState> end = EventWrap::FromValue(info[0], "end");
    auto snapshot = [](EventState& e, const char* which) {
      std::lock_guard<std::mutex> lock(e.mu);
      if (e.recorded == 0 || e.completed < e.recorded) {
        ThrowInvalidArgument(std::string("Event ") + std::to_string(e.id) + " (" + which + ") " +
                                 (e.recorded == 0 ? "was never recorded" : "has not completed yet") +
                                 ". HINT: record both events and await end.synchronize() before elapsedTime().",
                             {Num("event", static_cast<double>(e.id)), Str("which", which)});
      }
      return e.time;
    };
    auto t0 = snapshot(*state_, "start");
    auto t1 = snapshot(*end, "end");
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    return Napi::Number::New(info.Env(), ms);
  });
}

Napi::Value EventWrap::GetDevice(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), state_->device);
}

Napi::Value EventWrap::GetId(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(state_->id));
}

Napi::Value EventWrap::GetRecorded(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return Napi::Number::New(info.Env(), static_cast<double>(state_->recorded));
}

}  // namespace ascent
