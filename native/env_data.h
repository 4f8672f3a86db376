// The one per-env registry: everything the addon keeps per env (main thread or
// worker) lives here, as napi instance data: the JS error factory, class
// constructors, the completion thread-safe function, the streams this env created
// and its communicator state (comm/comm_env.h). Its one env cleanup hook first
// aborts this env's communicators and joins their rendezvous threads, then stops
// and joins every stream thread, so a worker may exit or be terminated at any point
// without a thread of ours touching a dead env.
//
// What is NOT here is process-global on purpose: device memory (device/registry.h)
// and communicator groups (comm/group.h) are shared by the main thread and every
// worker, so ranks in different workers meet in them. The addon is loaded in the
// main thread before any worker, so that state lives as long as the process.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "device/buffer_table.h"
#include "errors.h"

namespace ascent {

class EnvData;
class StreamImpl;
namespace comm {
class CommEnv;
}

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
  ~EnvData();

  // Installs the JS side: errorFactory(code, message, details) and
  // onComplete(token, error | undefined, ArrayBuffer | undefined).
  void Init(Napi::Env env, Napi::Function error_factory, Napi::Function on_complete);
  bool initialized() const { return initialized_; }
  // The TSFN keeps the event loop alive only while JS awaits a completion.
  void SetRef(Napi::Env env, bool ref);
  // Any thread. Dropped silently once the env is being torn down.
  void Post(std::unique_ptr<Completion> completion);
  // The completion of an op that ran inline (device/stream.h) on this env's own thread, kept
  // for the enqueueing JS call to take at once (takeInlineCompletion) instead of a trip
  // through the thread-safe function and the event loop (~20 us of a 23 us round trip).
  void StoreInline(std::unique_ptr<Completion> completion);
  // Removes and returns `token`'s inline completion (null if none). Drops any other kept
  // one: the JS side takes a token's completion right after its enqueue or never.
  std::unique_ptr<Completion> TakeInline(uint64_t token);

  void AddStream(std::shared_ptr<StreamImpl> stream);
  void Teardown();

  Napi::FunctionReference error_factory;
  Napi::FunctionReference stream_ctor;
  Napi::FunctionReference event_ctor;
  Napi::FunctionReference comm_ctor;
  // Device buffers (device/buffer_table.h, set by initBuffers): this env's slots, the JS
  // symbol a buffer object keeps its handle under, and the Float64Array [id, device, size]
  // through which a new handle's metadata reaches the JS constructor.
  BufferTable* buffers = BufferTable::New();
  Napi::Reference<Napi::Value> buffer_key;
  Napi::Reference<Napi::Value> buffer_info_ref;
  double* buffer_info = nullptr;
  // Set by InitComm; torn down before the streams.
  std::unique_ptr<comm::CommEnv> comm;

 private:
  static void CleanupHook(void* arg);
  static void Finalize(napi_env env, void* data, void* hint);

  napi_env env_ = nullptr;
  bool initialized_ = false;
  bool torn_down_ = false;
  std::shared_ptr<TsfnState> tsfn_state_ = std::make_shared<TsfnState>();
  CompletionTsfn tsfn_;
  std::mutex inline_mu_;
  std::vector<std::unique_ptr<Completion>> inline_done_;
  std::mutex streams_mu_;
  std::vector<std::shared_ptr<StreamImpl>> streams_;
};

}  // namespace ascent
