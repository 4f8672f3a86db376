// ascent_mpi.node: the MPI part of Ascent, a separate addon so that the main one
// never links libmpi (a single-process run must not need MPI). Every export
// queues an op for the process's net thread (net_thread.h) and returns a promise
// settled on the calling thread. Typings and error mapping: src/runtime/comm/net.ts.
#include <napi.h>

#include <functional>
#include <memory>

#include "net_common.h"
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

// `start` runs on the net thread; it either returns the op's result or, for a tracked
// request, returns `deferred` and hands `done` to the thread, which calls it later.
Napi::Value submitTracked(Napi::Env env, std::function<NetResult(NetDone)> start, std::initializer_list<Napi::Value> keep = {}) {
  auto* p = new Pending(env);
  p->tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}), "ascent-mpi-op", 0, 1);
  for (const auto& v : keep) p->keep.push_back(Napi::Persistent(v));
  Napi::Value promise = p->deferred.Promise();
  NetDone done = [p](NetResult&& r) {
    p->result = std::move(r);
    Napi::ThreadSafeFunction tsfn = p->tsfn;
    if (tsfn.BlockingCall(p, settle) != napi_ok) delete p;
    tsfn.Release();
  };
  NetThread::get().submit(NetOp{[start, done] { return start(done); }, done});
  return promise;
}

Napi::Value submit(Napi::Env env, std::function<NetResult()> run, std::initializer_list<Napi::Value> keep = {}) {
  return submitTracked(env, [run](NetDone) { return run(); }, keep);
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

// The communicator among processes an op runs on: argument i, 0 (the world) when absent.
int commArg(const Napi::CallbackInfo& info, size_t i) {
  return info.Length() > i && !info[i].IsUndefined() ? static_cast<int>(num(info, i, "commId")) : 0;
}

Napi::Value Init(const Napi::CallbackInfo& info) {
  return submit(info.Env(), [] { return NetThread::get().init(); });
}

Napi::Value Finalize(const Napi::CallbackInfo& info) {
  return submit(info.Env(), [] { return NetThread::get().finalize(); });
}

// Sizes are checked on the net thread, which owns the communicator table.
NetResult sized(int commId, size_t have, size_t per, const char* what) {
  NetComm* c = NetThread::get().comm(commId);
  if (c && have != per * static_cast<size_t>(c->size)) return bad(std::string(what) + " must hold size x the per-process bytes");
  return NetResult{};
}

// allReduce(view, count, dtype, redop, timeoutMs, commId?): in place.
Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  View v = viewOf(info[0], "buffer");
  int64_t count = num(info, 1, "count"), dtype = num(info, 2, "dtype"), op = num(info, 3, "op"), t = num(info, 4, "timeoutMs");
  int c = commArg(info, 5);
  return submitTracked(info.Env(), [=](NetDone done) { return netAllReduce(v.data, count, static_cast<int>(dtype), static_cast<int>(op), t, c, std::move(done)); }, {info[0]});
}

// broadcast(view, rootProcess, timeoutMs, commId?): in place.
Napi::Value Broadcast(const Napi::CallbackInfo& info) {
  View v = viewOf(info[0], "buffer");
  int64_t root = num(info, 1, "root"), t = num(info, 2, "timeoutMs");
  int c = commArg(info, 3);
  return submitTracked(info.Env(), [=](NetDone done) { return netBroadcast(v.data, static_cast<int64_t>(v.bytes), static_cast<int>(root), t, c, std::move(done)); }, {info[0]});
}

// allGather(send, recv, timeoutMs, commId?, kind?): recv holds size x send bytes.
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  View s = viewOf(info[0], "send"), r = viewOf(info[1], "recv");
  int64_t t = num(info, 2, "timeoutMs");
  int c = commArg(info, 3);
  int64_t kind = info.Length() > 4 && info[4].IsNumber() ? num(info, 4, "kind") : 0;
  return submitTracked(info.Env(), [=](NetDone done) {
    NetResult wrong = sized(c, r.bytes, s.bytes, "allGather: recv");
    return wrong.err != NetErr::kNone ? wrong : netAllGather(s.data, r.data, static_cast<int64_t>(s.bytes), t, c, kind, std::move(done));
  }, {info[0], info[1]});
}

Napi::Value Barrier(const Napi::CallbackInfo& info) {
  int64_t t = num(info, 0, "timeoutMs");
  int c = commArg(info, 1);
  return submitTracked(info.Env(), [=](NetDone done) { return netBarrier(t, c, std::move(done)); });
}

// allToAll(send, recv, timeoutMs, commId?): send and recv hold size equal blocks, one per process.
Napi::Value AllToAll(const Napi::CallbackInfo& info) {
  View s = viewOf(info[0], "send"), r = viewOf(info[1], "recv");
  int64_t t = num(info, 2, "timeoutMs");
  int c = commArg(info, 3);
  if (s.bytes != r.bytes) throw Napi::RangeError::New(info.Env(), "allToAll: send and recv must have the same size");
  return submitTracked(info.Env(), [=](NetDone done) {
    NetComm* comm = NetThread::get().comm(c);
    int64_t block = comm && comm->size > 0 ? static_cast<int64_t>(s.bytes) / comm->size : 0;
    NetResult wrong = sized(c, s.bytes, static_cast<size_t>(block), "allToAll: send");
    return wrong.err != NetErr::kNone ? wrong : netAllToAll(s.data, r.data, block, t, c, std::move(done));
  }, {info[0], info[1]});
}

// reduceScatter(send, recv, blockCount, dtype, redop, timeoutMs, commId?): send holds size x recv.
Napi::Value ReduceScatter(const Napi::CallbackInfo& info) {
  View s = viewOf(info[0], "send"), r = viewOf(info[1], "recv");
  int64_t count = num(info, 2, "blockCount"), dtype = num(info, 3, "dtype"), op = num(info, 4, "op"), t = num(info, 5, "timeoutMs");
  int c = commArg(info, 6);
  return submitTracked(info.Env(), [=](NetDone done) {
    NetResult wrong = sized(c, s.bytes, r.bytes, "reduceScatter: send");
    return wrong.err != NetErr::kNone ? wrong : netReduceScatter(s.data, r.data, count, static_cast<int>(dtype), static_cast<int>(op), t, c, std::move(done));
  }, {info[0], info[1]});
}

// send(view, peerProcess, tag, timeoutMs, commId?) / recv(view, peerProcess, tag, timeoutMs, commId?).
Napi::Value P2P(const Napi::CallbackInfo& info, bool isSend) {
  View v = viewOf(info[0], "buffer");
  int64_t peer = num(info, 1, "peer"), tag = num(info, 2, "tag"), t = num(info, 3, "timeoutMs");
  int c = commArg(info, 4);
  return submitTracked(info.Env(), [=](NetDone done) {
    return isSend ? netSend(v.data, static_cast<int64_t>(v.bytes), static_cast<int>(peer), static_cast<int>(tag), t, c, std::move(done))
                  : netRecv(v.data, static_cast<int64_t>(v.bytes), static_cast<int>(peer), static_cast<int>(tag), t, c, std::move(done));
  }, {info[0]});
}
Napi::Value Send(const Napi::CallbackInfo& info) { return P2P(info, true); }
Napi::Value Recv(const Napi::CallbackInfo& info) { return P2P(info, false); }

// split(parentId, colors Int32Array, member Uint8Array, keyPrefix, timeoutMs): resolves to JSON {color: id}.
Napi::Value Split(const Napi::CallbackInfo& info) {
  if (!info[1].IsTypedArray() || !info[2].IsTypedArray()) throw Napi::TypeError::New(info.Env(), "split expects an Int32Array of colors and a Uint8Array of flags");
  int parent = static_cast<int>(num(info, 0, "parentId"));
  auto ca = info[1].As<Napi::Int32Array>();
  auto ma = info[2].As<Napi::Uint8Array>();
  std::vector<int> colors(ca.Data(), ca.Data() + ca.ElementLength());
  std::vector<uint8_t> member(ma.Data(), ma.Data() + ma.ElementLength());
  std::string prefix = info[3].ToString().Utf8Value();
  int64_t t = num(info, 4, "timeoutMs");
  return submitTracked(info.Env(), [=](NetDone done) { return netSplit(parent, colors, member, prefix, t, std::move(done)); });
}

// lookupComm(key): the id a split registered under key, or -1.
Napi::Value LookupComm(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), NetThread::get().lookupComm(info[0].ToString().Utf8Value()));
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
  exports.Set("allToAll", Napi::Function::New(env, AllToAll));
  exports.Set("reduceScatter", Napi::Function::New(env, ReduceScatter));
  exports.Set("send", Napi::Function::New(env, Send));
  exports.Set("recv", Napi::Function::New(env, Recv));
  exports.Set("split", Napi::Function::New(env, Split));
  exports.Set("lookupComm", Napi::Function::New(env, LookupComm));
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
