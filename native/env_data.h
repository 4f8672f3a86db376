// Per-env (main thread or worker) state, kept as napi instance data: the JS error
// factory, class constructors, the completion thread-safe function and the streams
// this env created. The env cleanup hook stops and joins every one of those stream
// threads, so a worker may exit or be terminated at any point without a stream
// thread touching a dead env.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "errors.h"

namespace ascent {

class EnvData;
class StreamImpl;

// What a stream thread reports for an op that carried a completion token.
struct Completion {
  uint64_t token = 0;
  bool ok = true;
  ErrorInfo error;
  bool has_bytes = false;
  std::vector<uint8_t> bytes;
};

void CallCompletion(Napi::Env env, Napi::Function callback, EnvData* context, Completion* data);
using CompletionTsfn = Napi::TypedThreadSafeFunction<EnvData, Completion, CallCompletion>;

// Whether the TSFN may still be called. Shared with the TSFN finalizer, which can
// run after EnvData is gone.
struct TsfnState {
  std::mutex mu;
  bool alive = false;
};

class EnvData {
 public:
  static EnvData* Get(Napi::Env env) { return env.GetInstanceData<EnvData>(); }
  static void Install(Napi::Env env);

  // Installs the JS side: errorFactory(code, message, details) and
  // onComplete(token, error | undefined, ArrayBuffer | undefined).
  void Init(Napi::Env env, Napi::Function error_factory, Napi::Function on_complete);
  bool initialized() const { return initialized_; }
  // The TSFN keeps the event loop alive only while JS awaits a completion.
  void SetRef(Napi::Env env, bool ref);
  // Any thread. Dropped silently once the env is being torn down.
  void Post(std::unique_ptr<Completion> completion);

  void AddStream(std::shared_ptr<StreamImpl> stream);
  void Teardown();

  Napi::FunctionReference error_factory;
  Napi::FunctionReference buffer_ctor;
  Napi::FunctionReference stream_ctor;
  Napi::FunctionReference event_ctor;

 private:
  static void CleanupHook(void* arg);
  static void Finalize(napi_env env, void* data, void* hint);

  napi_env env_ = nullptr;
  bool initialized_ = false;
  bool torn_down_ = false;
  std::shared_ptr<TsfnState> tsfn_state_ = std::make_shared<TsfnState>();
  CompletionTsfn tsfn_;
  std::mutex streams_mu_;
  std::vector<std::shared_ptr<StreamImpl>> streams_;
};

}  // namespace ascent
