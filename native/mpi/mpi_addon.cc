// ascent_mpi.node: the MPI part of Ascent, a separate addon so that the main one
// never links libmpi (a single-process run must not need MPI). Every export
// queues an op for the process's net thread (net_thread.h) and returns a promise
// settled on the calling thread. Typings and error mapping: src/runtime/comm/net.ts.
#include <napi.h>

#include <functional>
#include <memory>

#include "net_ops.h"
#include "net_thread.h"

namespace ascent_mpi {
namespace {

struct Pending {
  explicit Pending(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise::Deferred deferred;
  Napi::ThreadSafeFunction tsfn;
  std::vector<Napi::Reference<Napi::Value>> keep;  // buffers the op reads / writes stay alive
  NetResult result;
};

const char* errCode(NetErr e) {
  switch (e) {
    case NetErr::kTimeout: return "timeout";
    case NetErr::kMismatch: return "mismatch";
    case NetErr::kAborted: return "aborted";
    case NetErr::kMpi: return "mpi";
    default: return "state";
  }
}

void settle(Napi::Env env, Napi::Function, Pending* p) {
  std::unique_ptr<Pending> own(p);
  if (env == nullptr) return;  // the env is gone (its worker ended): nobody waits
  Napi::HandleScope scope(env);
  const NetResult& r = p->result;
  if (r.err == NetErr::kNone) {
    p->deferred.Resolve(r.json.empty() ? env.Undefined() : Napi::String::New(env, r.json));
    return;
  }
  Napi::Error e = Napi::Error::New(env, r.message);
  e.Set("netCode", Napi::String::New(env, errCode(r.err)));
  Napi::Array culprits = Napi::Array::New(env, r.culpritProcesses.size());
  for (size_t i = 0; i < r.culpritProcesses.size(); i++) culprits.Set(static_cast<uint32_t>(i), Napi::Number::New(env, r.culpritProcesses[i]));
  e.Set("culpritProcesses", culprits);
  p->deferred.Reject(e.Value());
}

Napi::Value submit(Napi::Env env, std::function<NetResult()> run, std::initializer_list<Napi::Value> keep = {}) {
  auto* p = new Pending(env);
  p->tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}), "ascent-mpi-op", 0, 1);
  for (const auto& v : keep) p->keep.push_back(Napi::Persistent(v));
  Napi::Value promise = p->deferred.Promise();
  NetThread::get().submit(NetOp{std::move(run), [p](NetResult&& r) {
                                  p->result = std::move(r);
                                  Napi::ThreadSafeFunction tsfn = p->tsfn;
                                  if (tsfn.BlockingCall(p, settle) != napi_ok) delete p;
                                  tsfn.Release();
                                }});
  return promise;
}

struct View {
  void* data = nullptr;
  size_t bytes = 0;
};

View viewOf(const Napi::Value& v, const char* what) {
  if (v.IsTypedArray()) {
    auto t = v.As<Napi::TypedArray>();
    return {static_cast<uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset(), t.ByteLength()};
  }
  if (v.IsArrayBuffer()) {
    auto b = v.As<Napi::ArrayBuffer>();
    return {b.Data(), b.ByteLength()};
  }
  throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a typed array or ArrayBuffer");
}

int64_t num(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (!info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a number");
  return info[i].As<Napi::Number>().Int64Value();
}

Napi::Value Init(const Napi::CallbackInfo& info) {
  return submit(info.Env(), [] { return NetThread::get().init(); });
}

Napi::Value Finalize(const Napi::CallbackInfo& info) {
  return submit(info.Env(), [] { return NetThread::get().finalize(); });
}

// allReduce(view, count, dtype, redop, timeoutMs): in place.
Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  View v = viewOf(info[0], "buffer");
  int64_t count = num(info, 1, "count"), dtype = num(info, 2, "dtype"), op = num(info, 3, "op"), t = num(info, 4, "timeoutMs");
  return submit(info.Env(), [=] { return netAllReduce(v.data, count, static_cast<int>(dtype), static_cast<int>(op), t); }, {info[0]});
}

// broadcast(view, rootProcess, timeoutMs): in place.
Napi::Value Broadcast(const Napi::CallbackInfo& info) {
  View v = viewOf(info[0], "buffer");
  int64_t root = num(info, 1, "root"), t = num(info, 2, "timeoutMs");
  return submit(info.Env(), [=] { return netBroadcast(v.data, static_cast<int64_t>(v.bytes), static_cast<int>(root), t); }, {info[0]});
}

// allGather(send, recv, timeoutMs): recv holds size x send bytes.
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  View s = viewOf(info[0], "send"), r = viewOf(info[1], "recv");
  int64_t t = num(info, 2, "timeoutMs");
  if (r.bytes != s.bytes * static_cast<size_t>(NetThread::get().size())) throw Napi::RangeError::New(info.Env(), "recv must hold size x send bytes");
  return submit(info.Env(), [=] { return netAllGather(s.data, r.data, static_cast<int64_t>(s.bytes), t); }, {info[0], info[1]});
}

Napi::Value Barrier(const Napi::CallbackInfo& info) {
  int64_t t = num(info, 0, "timeoutMs");
  return submit(info.Env(), [=] { return netBarrier(t); });
}

// abortJob(reason, timeoutMs): tells every other process (their onAbort callbacks run).
Napi::Value AbortJob(const Napi::CallbackInfo& info) {
  std::string reason = info[0].ToString().Utf8Value();
  int64_t t = num(info, 1, "timeoutMs");
  return submit(info.Env(), [=] { return NetThread::get().notifyAbort(reason, t); });
}

// onAbort(fn(reason, process)): fn runs on this thread when another process aborts the job.
Napi::Value OnAbort(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throw Napi::TypeError::New(env, "onAbort expects a function");
  auto tsfn = std::make_shared<Napi::ThreadSafeFunction>(Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "ascent-mpi-abort", 0, 1));
  tsfn->Unref(env);  // a registered listener must not keep the process alive
  NetThread::get().onAbort([tsfn](const AbortNotice& n) {
    auto* copy = new AbortNotice(n);
    napi_status s = tsfn->NonBlockingCall(copy, [](Napi::Env e, Napi::Function fn, AbortNotice* a) {
      std::unique_ptr<AbortNotice> own(a);
      if (e == nullptr) return;
      fn.Call({Napi::String::New(e, a->reason), Napi::Number::New(e, a->process)});
    });
    if (s != napi_ok) delete copy;
  });
  return env.Undefined();
}

Napi::Value AbortedBecause(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), NetThread::get().abortedBecause());
}

Napi::Object Module(Napi::Env env, Napi::Object exports) {
  exports.Set("init", Napi::Function::New(env, Init));
  exports.Set("finalize", Napi::Function::New(env, Finalize));
  exports.Set("allReduce", Napi::Function::New(env, AllReduce));
  exports.Set("broadcast", Napi::Function::New(env, Broadcast));
  exports.Set("allGather", Napi::Function::New(env, AllGather));
  exports.Set("barrier", Napi::Function::New(env, Barrier));
  exports.Set("abortJob", Napi::Function::New(env, AbortJob));
  exports.Set("onAbort", Napi::Function::New(env, OnAbort));
  exports.Set("abortedBecause", Napi::Function::New(env, AbortedBecause));
  return exports;
}

}  // namespace
}  // namespace ascent_mpi

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
  return ascent_mpi::Module(env, exports);
}

NODE_API_MODULE(ascent_mpi, InitModule)
