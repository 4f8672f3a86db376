// Module init. The addon is context-aware: each env (main thread, every worker)
// gets its own EnvData, the one per-env registry (env_data.h); the device registry
// and the communicator group table behind it are process-global on purpose.
#include <napi.h>

#include <cstring>

#include "args.h"
#include "bench/blas_baseline.h"
#include "bench/comm_floor.h"
#include "comm/communicator.h"
#include "device/buffer.h"
#include "device/event.h"
#include "device/registry.h"
#include "device/stream.h"
#include "env_data.h"
#include "errors.h"
#include "kernels/fast.h"
#include "kernels/matmul_amx.h"
#include "kernels/model/vec.h"

namespace ascent {
namespace {

int ArgOrdinal(const Napi::CallbackInfo& info, size_t i) {
  uint64_t v = ArgIndex(info, i, "device");
  if (v >= static_cast<uint64_t>(Registry::kMaxDevices)) {
    ThrowInvalidArgument("Expected a device ordinal in [0, " + std::to_string(Registry::kMaxDevices) +
                         ") but received " + std::to_string(v) + ".");
  }
  return static_cast<int>(v);
}

// init(errorFactory, onComplete)
Napi::Value Init(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    if (!Arg(info, 0).IsFunction() || !Arg(info, 1).IsFunction()) {
      ThrowInvalidArgument("init(errorFactory, onComplete) expects two functions.");
    }
    EnvData::Get(info.Env())->Init(info.Env(), info[0].As<Napi::Function>(), info[1].As<Napi::Function>());
    return info.Env().Undefined();
  });
}

Napi::Value SetCompletionRef(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    EnvData::Get(info.Env())->SetRef(info.Env(), ArgBool(info, 0, "ref"));
    return info.Env().Undefined();
  });
}

Napi::Object DeviceInfo(Napi::Env env, Device& d) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ordinal", Napi::Number::New(env, d.ordinal));
  o.Set("capacity", Napi::Number::New(env, static_cast<double>(d.pool.capacity())));
  return o;
}

// deviceGet(ordinal, defaultCapacity)
Napi::Value DeviceGet(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    int ordinal = ArgOrdinal(info, 0);
    uint64_t cap = ArgIndex(info, 1, "defaultCapacity");
    return DeviceInfo(info.Env(), Registry::Get().GetOrCreate(ordinal, cap));
  });
}

// deviceConfigure(ordinal, capacity)
Napi::Value DeviceConfigure(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    int ordinal = ArgOrdinal(info, 0);
    uint64_t cap = ArgIndex(info, 1, "capacity");
    return DeviceInfo(info.Env(), Registry::Get().Configure(ordinal, cap));
  });
}

Napi::Value DeviceStats(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Napi::Env env = info.Env();
    PoolStats s = Registry::Get().Existing(ArgOrdinal(info, 0)).pool.Stats();
    Napi::Object o = Napi::Object::New(env);
    o.Set("allocated", Napi::Number::New(env, static_cast<double>(s.allocated)));
    o.Set("peak", Napi::Number::New(env, static_cast<double>(s.peak)));
    o.Set("capacity", Napi::Number::New(env, static_cast<double>(s.capacity)));
    o.Set("hostSyncs", Napi::Number::New(env, static_cast<double>(s.host_syncs)));
    o.Set("largestFreeBlock", Napi::Number::New(env, static_cast<double>(s.largest_free_block)));
    o.Set("numAllocs", Napi::Number::New(env, static_cast<double>(s.num_allocs)));
    o.Set("totalAllocs", Napi::Number::New(env, static_cast<double>(s.total_allocs)));
    o.Set("cached", Napi::Number::New(env, static_cast<double>(s.cached)));
    return o;
  });
}

Napi::Value DeviceResetPeak(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Registry::Get().Existing(ArgOrdinal(info, 0)).pool.ResetPeak();
    return info.Env().Undefined();
  });
}

Napi::Value DeviceEmptyCache(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    return Napi::Number::New(info.Env(), static_cast<double>(Registry::Get().Existing(ArgOrdinal(info, 0)).pool.EmptyCache()));
  });
}

// alloc(ordinal, bytes) -> handle (device/buffer.h)
Napi::Value Alloc(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Device& d = Registry::Get().Existing(ArgOrdinal(info, 0));
    uint64_t bytes = ArgIndex(info, 1, "bytes");
    return NewBufferHandle(info.Env(), Block::Allocate(d, bytes));
  });
}

// releaseBuffer(handle): drops the handle's reference (a no-op when it was released before).
Napi::Value ReleaseBuffer(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    napi_env env = info.Env();
    napi_valuetype type;
    void* handle;
    if (napi_typeof(env, Arg(info, 0), &type) != napi_ok || type != napi_external ||
        napi_get_value_external(env, info[0], &handle) != napi_ok) {
      ThrowInvalidArgument("releaseBuffer() expects a buffer handle (from alloc or importBuffer).");
    }
    EnvData::Get(info.Env())->buffers->Release(env, handle);
    return info.Env().Undefined();
  });
}

// initBuffers(handleKey, info): the symbol JS buffers keep their handle under, and the
// Float64Array(3) alloc / importBuffer write [id, device, size] to.
Napi::Value InitBuffers(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Napi::Value key = Arg(info, 0);
    Napi::Value arr = Arg(info, 1);
    if (!key.IsSymbol() || !arr.IsTypedArray() || arr.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
        arr.As<Napi::TypedArray>().ElementLength() < 3) {
      ThrowInvalidArgument("initBuffers(handleKey, info) expects a symbol and a Float64Array of at least 3 elements.");
    }
    EnvData* data = EnvData::Get(info.Env());
    data->buffer_key = Napi::Persistent(key);
    data->buffer_info_ref = Napi::Persistent(arr);
    // The array's backing store does not move (JS makes it over an ArrayBuffer), and the
    // reference above keeps it alive.
    data->buffer_info = arr.As<Napi::Float64Array>().Data();
    return info.Env().Undefined();
  });
}

// importBuffer(id) -> handle sharing the block
Napi::Value ImportBuffer(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t id = ArgIndex(info, 0, "id");
    std::shared_ptr<Block> block = Registry::Get().FindBlock(id);
    if (!block) {
      ThrowInvalidArgument("Buffer " + std::to_string(id) +
                               " does not exist (it was released by every holder, or the id is wrong). HINT: the "
                               "sender must keep its tensor alive until the receiver has imported the handle.",
                           {Num("buffer", static_cast<double>(id))});
    }
    return NewBufferHandle(info.Env(), std::move(block));
  });
}

Napi::Value HostMemory(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(HostMemoryBytes()));
}

Napi::Value CpuFeatures(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  __builtin_cpu_init();
  o.Set("avx2", Napi::Boolean::New(info.Env(), __builtin_cpu_supports("avx2")));
  o.Set("fma", Napi::Boolean::New(info.Env(), __builtin_cpu_supports("fma")));
  o.Set("avx512f", Napi::Boolean::New(info.Env(), __builtin_cpu_supports("avx512f")));
  o.Set("avx512bf16", Napi::Boolean::New(info.Env(), __builtin_cpu_supports("avx512bf16")));
  // AMX counts only when usable here: CPU, OS and this process's tile permission (else why not).
  const char* amx_why_not = fast::AmxUnusableReason();
  o.Set("amx", Napi::Boolean::New(info.Env(), amx_why_not == nullptr));
  o.Set("amxWhyNot", amx_why_not ? Napi::Value(Napi::String::New(info.Env(), amx_why_not)) : info.Env().Null());
  return o;
}

// takeInlineCompletion(token) -> undefined | { error, bytes }: the completion of an op with this
// token that ran inline during the enqueue call just made (env_data.h), settled by the caller at once.
Napi::Value TakeInlineCompletion(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    Napi::Env env = info.Env();
    std::unique_ptr<Completion> c = EnvData::Get(env)->TakeInline(ArgToken(info, 0));
    if (!c) return env.Undefined();
    Napi::Object o = Napi::Object::New(env);
    o.Set("error", c->ok ? env.Undefined() : MakeJsError(env, c->error));
    if (c->has_bytes) {
      Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, c->bytes.size());
      if (!c->bytes.empty()) std::memcpy(ab.Data(), c->bytes.data(), c->bytes.size());
      o.Set("bytes", ab);
    } else {
      o.Set("bytes", env.Undefined());
    }
    return o;
  });
}

// setMatmulKernel('auto' | 'portable' | 'avx2' | 'avx512' | 'amx') -> { fp32, bf16, vec }: the micro-kernels and the
// model kernels' vector primitives now in use (test hook).
Napi::Value SetMatmulKernel(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Napi::Value v = Arg(info, 0);
    std::string mode = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
    fast::MatmulKernelMode m;
    if (mode == "auto") m = fast::MatmulKernelMode::kAuto;
    else if (mode == "portable") m = fast::MatmulKernelMode::kPortable;
    else if (mode == "avx2") m = fast::MatmulKernelMode::kAvx2;
    else if (mode == "avx512") m = fast::MatmulKernelMode::kAvx512;
    else if (mode == "amx") m = fast::MatmulKernelMode::kAmx;
    else ThrowInvalidArgument("Expected 'auto', 'portable', 'avx2', 'avx512' or 'amx' for setMatmulKernel().");
    fast::SetMatmulKernelMode(m);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("fp32", Napi::String::New(info.Env(), fast::MatmulKernelName()));
    o.Set("bf16", Napi::String::New(info.Env(), fast::MatmulBf16KernelName()));
    o.Set("vec", Napi::String::New(info.Env(), model::Vec().name));
    return o;
  });
}

}  // namespace

Napi::Object ModuleInit(Napi::Env env, Napi::Object exports) {
  EnvData::Install(env);
  EnvData* data = EnvData::Get(env);
  Napi::Function stream = StreamWrap::Define(env);
  Napi::Function event = EventWrap::Define(env);
  data->stream_ctor = Napi::Persistent(stream);
  data->event_ctor = Napi::Persistent(event);
  exports.Set("Stream", stream);
  exports.Set("Event", event);
  exports.Set("init", Napi::Function::New<Init>(env, "init"));
  exports.Set("setCompletionRef", Napi::Function::New<SetCompletionRef>(env, "setCompletionRef"));
  exports.Set("deviceGet", Napi::Function::New<DeviceGet>(env, "deviceGet"));
  exports.Set("deviceConfigure", Napi::Function::New<DeviceConfigure>(env, "deviceConfigure"));
  exports.Set("deviceStats", Napi::Function::New<DeviceStats>(env, "deviceStats"));
  exports.Set("deviceResetPeak", Napi::Function::New<DeviceResetPeak>(env, "deviceResetPeak"));
  exports.Set("deviceEmptyCache", Napi::Function::New<DeviceEmptyCache>(env, "deviceEmptyCache"));
  exports.Set("alloc", Napi::Function::New<Alloc>(env, "alloc"));
  exports.Set("importBuffer", Napi::Function::New<ImportBuffer>(env, "importBuffer"));
  exports.Set("releaseBuffer", Napi::Function::New<ReleaseBuffer>(env, "releaseBuffer"));
  exports.Set("initBuffers", Napi::Function::New<InitBuffers>(env, "initBuffers"));
  exports.Set("hostMemory", Napi::Function::New<HostMemory>(env, "hostMemory"));
  exports.Set("cpuFeatures", Napi::Function::New<CpuFeatures>(env, "cpuFeatures"));
  InitComm(env, exports);  // after EnvData::Install: it adds its state to the env's EnvData
  exports.Set("setMatmulKernel", Napi::Function::New<SetMatmulKernel>(env, "setMatmulKernel"));
  exports.Set("takeInlineCompletion", Napi::Function::New<TakeInlineCompletion>(env, "takeInlineCompletion"));
  InitBlasBaseline(env, exports);
  InitCommFloor(env, exports);
  return exports;
}

}  // namespace ascent

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return ascent::ModuleInit(env, exports); }

NODE_API_MODULE(ascent_native, InitModule)
