#include "comm/communicator.h"

#include <cmath>
#include <cstring>
#include <cstdio>

#include "args.h"
#include "comm/collectives.h"
#include "comm/comm_env.h"
#include "device/registry.h"
#include "device/span.h"
#include "device/stream.h"
#include "env_data.h"
#include "type_tags.h"

namespace ascent {
namespace comm {
namespace {

// ---------------------------------------------------------------- argument readers

uint64_t Mul(uint64_t a, uint64_t b) { return CheckedMul(a, b, "a collective's size"); }

DType CommDtype(Reader& r) {
  DType t = r.Dtype("dtype");
  if (t == DType::kU8) r.Fail("Collectives support fp32, bf16, fp16, int32 and int64, not uint8.", {Str("argument", "dtype")});
  return t;
}

RedOp ReadRedOp(Reader& r) {
  uint64_t v = r.Index("op");
  if (v >= static_cast<uint64_t>(kNumRedOps)) {
    r.Fail("Unknown reduce op code " + std::to_string(v) + "; expected 0 (sum) to " + std::to_string(kNumRedOps - 1) + ".",
           {Str("argument", "op")});
  }
  return static_cast<RedOp>(v);
}

// Child communicator id for (parent, seq, color): the same on every member, unique
// per split call.
std::string ChildId(const std::string& parent, uint64_t seq, int color) {
  std::string key = parent + "/" + std::to_string(seq) + "/" + std::to_string(color);
  auto fnv = [&](uint64_t h) {
    for (unsigned char c : key) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    return h;
  };
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(fnv(14695981039346656037ULL)),
                static_cast<unsigned long long>(fnv(0x9e3779b97f4a7c15ULL)));
  return buf;
}

}  // namespace

// ---------------------------------------------------------------- class

const std::vector<CommWrap::Row>& CommWrap::Methods() {
  static const auto* rows = new std::vector<Row>{
      {"abortCause", &CommWrap::AbortCause, false},     {"allReduce", &CommWrap::AllReduce, true},
      {"broadcast", &CommWrap::Broadcast, true},        {"allGather", &CommWrap::AllGather, true},
      {"reduceScatter", &CommWrap::ReduceScatter, true}, {"allToAll", &CommWrap::AllToAll, true},
      {"allToAllV", &CommWrap::AllToAllV, true},        {"barrier", &CommWrap::Barrier, true},
      {"send", &CommWrap::Send, true},                  {"recv", &CommWrap::Recv, true},
      {"groupStart", &CommWrap::GroupStart, true},
      // groupEnd checks usability itself, after it closed the group (see GroupEnd).
      {"groupEnd", &CommWrap::GroupEnd, false},         {"split", &CommWrap::Split, true},
      {"abort", &CommWrap::Abort, false},               {"destroy", &CommWrap::Destroy, false},
      {"flightRecord", &CommWrap::FlightRecord, false},
  };
  return *rows;
}

Napi::Function CommWrap::Define(Napi::Env env) {
  std::vector<PropertyDescriptor> props = {InstanceAccessor<&CommWrap::GetRank>("rank"),
                                           InstanceAccessor<&CommWrap::GetSize>("size"),
                                           InstanceAccessor<&CommWrap::GetDevice>("device"),
                                           InstanceAccessor<&CommWrap::GetId>("id"),
                                           InstanceAccessor<&CommWrap::GetAborted>("aborted"),
                                           InstanceAccessor<&CommWrap::GetDestroyed>("destroyed")};
  for (const Row& row : Methods()) {
    props.push_back(InstanceMethod<&CommWrap::Dispatch>(row.name, napi_default, const_cast<Row*>(&row)));
  }
  return DefineClass(env, "Communicator", props);
}

Napi::Value CommWrap::Dispatch(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    const Row* row = static_cast<const Row*>(info.Data());
    if (row->usable) CheckUsable(row->name);
    Reader r(info, row->name);
    r.SetDevice(impl_->device, "the communicator is on device", "commDevice");
    return (this->*row->run)(r);
  });
}

CommImpl::~CommImpl() {
  // Gone without destroy() while its group may still be in use by its peers (see Departures).
  if (departures && !destroyed && group && !group->aborted()) departures->Add(group, rank, device);
}

Napi::Object CommWrap::NewInstance(Napi::Env env, std::shared_ptr<CommImpl> impl) {
  CommEnv& ce = GetCommEnv(env);
  Napi::Object obj = EnvData::Get(env)->comm_ctor.New({});
  CommWrap::Unwrap(obj)->impl_ = impl;
  ce.AddComm(impl);
  return obj;
}

// Only NewInstance makes usable communicators; `new Communicator()` from JS gives
// one that is never ready.
CommWrap::CommWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CommWrap>(info) {
  impl_ = std::make_shared<CommImpl>();
}

Napi::Value CommWrap::GetRank(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), impl_->rank); }
Napi::Value CommWrap::GetSize(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), impl_->size); }
Napi::Value CommWrap::GetDevice(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), impl_->device); }
Napi::Value CommWrap::GetId(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return Napi::String::New(info.Env(), impl_->group ? impl_->group->id() : "");
}
Napi::Value CommWrap::GetAborted(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return Napi::Boolean::New(info.Env(), impl_->group && impl_->group->aborted());
}
Napi::Value CommWrap::GetDestroyed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), impl_->destroyed);
}

Napi::Value CommWrap::AbortCause(Reader& r) {
  std::shared_ptr<CommGroup> g;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    g = impl_->group;
  }
  if (!g || !g->aborted()) return r.Env().Null();
  return MakeJsError(r.Env(), g->cause());
}

void CommWrap::CheckUsable(const char* what) {
  CommImpl& c = *impl_;
  if (!c.ready.load(std::memory_order_acquire) || !c.group) {
    ThrowInvalidArgument(std::string("The communicator is not initialised; ") + what +
                         " needs the Communicator that initRank() / split() resolved to.");
  }
  if (c.destroyed) {
    ThrowInvalidArgument(std::string("Communicator ") + c.group->short_id() + " (rank " + std::to_string(c.rank) +
                             ") was destroyed; " + what + " cannot run on it.",
                         {Str("communicator", c.group->id()), Num("rank", c.rank)});
  }
  if (c.group->aborted()) {
    ErrorInfo cause = c.group->cause();
    ErrorInfo e{kCommAborted,
                "Communicator " + c.group->short_id() + " is aborted; " + c.group->Who(c.rank) + "'s " + what +
                    " fails at once. Cause: " + cause.message,
                {Str("communicator", c.group->id()), Num("rank", c.group->WorldRank(c.rank)), Str("op", what),
                 Str("causeCode", cause.code), Str("causeMessage", cause.message)}};
    CopyCulprits(cause, e);
    throw AscentException(std::move(e));
  }
}

StreamImpl& CommWrap::ReadStream(Reader& r, Napi::Object* js) {
  Napi::Value v = r.Value();
  if (!HasTypeTag(v, kStreamTag)) {
    r.Fail("Expected a Stream for the stream argument but received " + Describe(v) + ".", {Str("argument", "stream")});
  }
  StreamImpl& s = StreamWrap::Unwrap(v.As<Napi::Object>())->impl();
  if (s.device().ordinal != impl_->device) {
    ThrowInvalidArgument("Expected a stream of device " + std::to_string(impl_->device) + " (the device of rank " +
                             std::to_string(impl_->rank) + " of communicator " + impl_->group->short_id() +
                             ") but the stream belongs to device " + std::to_string(s.device().ordinal) +
                             ". HINT: enqueue collectives on a stream of the communicator's own device.",
                         {Num("expectedDevice", impl_->device), Num("streamDevice", s.device().ordinal)});
  }
  if (s.stopped()) s.Enqueue(nullptr);  // throws the destroyed-stream error, before any side effect
  if (js) *js = v.As<Napi::Object>();
  return s;
}

// The one checked submission path. Every argument was validated by the caller and
// Dispatch ran CheckUsable; from here on the call has effects: a flight-record
// entry (the seq and fingerprint the caller stamped), then ONE unit of work that
// runs `body` under a deadline of `timeout_ms` from its start. Collectives and P2P
// run as an op on `stream`; the split takes no stream (it is a rendezvous, like
// init), so with no stream the work runs on a thread of this env that the env
// cleanup hook joins. Either way a failure is recorded and reaches the token with
// its original error (see communicator.h).
uint64_t CommWrap::Submit(Napi::Env env, StreamImpl* stream, Work w) {
  std::shared_ptr<CommGroup> group = impl_->group;
  const int rank = impl_->rank;
  EnvData* data = EnvData::Get(env);
  const uint64_t fr = group->slot(rank).recorder.Enqueued(w.seq, w.name, w.fingerprint);
  // Runs the body with its flight record; rethrows its error after recording it.
  auto run = [group, rank, fr, timeout = w.timeout_ms, body = std::move(w.body)] {
    FlightRecorder& rec = group->slot(rank).recorder;
    rec.Started(fr);
    try {
      body(Deadline(timeout));
      rec.Ended(fr, true);
    } catch (const AscentException& e) {
      rec.Ended(fr, false, e.info().code);
      throw;
    }
  };
  if (stream == nullptr) {
    const uint64_t token = w.token;
    GetCommEnv(env).Spawn([run = std::move(run), data, token] {
      try {
        run();
        PostCompletion(data, token, nullptr);
      } catch (const AscentException& e) {
        PostCompletion(data, token, &e.info());
      }
    });
    return w.seq;
  }
  auto op = std::make_unique<Op>();
  op->name = w.name;
  op->token = w.token;
  op->keep = std::move(w.keep);
  op->batchable = w.batchable;
  // Skipped because this rank's stream failed earlier: the peers would wait for this rank
  // until their deadline; abort them now, naming this rank. Natively, so it holds whether
  // or not a host awaits this op (an op enqueued without a completion reports nothing).
  op->on_skip = [group, rank, stream_id = stream->id(), name = w.name](const ErrorInfo& sticky) {
    if (group->aborted()) return;
    const std::string reason = group->Who(rank) + "'s stream " + std::to_string(stream_id) + " failed before its " +
                               name + " could run: " + sticky.message;
    ErrorInfo e{kCommAborted, reason, {Num("abortedBy", group->WorldRank(rank)), Str("reason", reason)}};
    group->SetCulprits(e, {rank});
    group->Abort(std::move(e), 0, group->AnyInFlight());
  };
  op->run = [run = std::move(run), data](Op& self) {
    try {
      run();
    } catch (const AscentException& e) {
      // Report the original error to the awaiting promise (see communicator.h), after the
      // completions this stream held back for the ops before it (seq order, nothing lost).
      FlushStreamCompletions();
      PostCompletion(data, self.token, &e.info());
      self.token = 0;
      throw;
    }
  };
  return stream->Enqueue(std::move(op));
}

void CommWrap::Stamp(Desc& d) {
  d.seq = impl_->next_seq++;
  d.fingerprint = Fingerprint(d);
}

uint64_t CommWrap::EnqueueCollective(Napi::Env env, StreamImpl& stream, Desc d, uint64_t token,
                                     std::vector<std::shared_ptr<Block>> keep) {
  Stamp(d);
  std::shared_ptr<CommGroup> group = impl_->group;
  const int rank = impl_->rank;
  const double timeout = impl_->exec_timeout_ms;
  Work w{CollOpName(d.op), d.seq, d.fingerprint, token, std::move(keep), timeout,
         [group, rank, timeout, d = std::move(d)](Clock::time_point deadline) mutable {
           RunCollective(*group, rank, d, deadline, timeout);
         }};
  w.batchable = true;
  return Submit(env, &stream, std::move(w));
}

// ---------------------------------------------------------------- collectives

namespace {

Napi::Value Seq(Reader& r, uint64_t seq) { return Napi::Number::New(r.Env(), static_cast<double>(seq)); }

// Send and recv of one count-sized collective: (send, sendOffset, recv, recvOffset) at 0..3.
struct SendRecv {
  Span send, recv;
};

SendRecv ReadSendRecv(Reader& r, uint64_t send_bytes, uint64_t recv_bytes, size_t align) {
  SendRecv sr;
  sr.send = r.At(0).Buffer("send", send_bytes, align);
  sr.recv = r.Buffer("recv", recv_bytes, align);
  return sr;
}

}  // namespace

// allReduce(send, sendOffset, recv, recvOffset, count, dtype, op, stream, token)
Napi::Value CommWrap::AllReduce(Reader& r) {
  uint64_t count = r.At(4).Index("count");
  DType t = CommDtype(r);
  RedOp op = ReadRedOp(r);
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t bytes = Mul(count, DTypeSize(t));
  SendRecv b = ReadSendRecv(r, bytes, bytes, DTypeSize(t));
  if (Overlaps(b.send, b.recv) && b.send.offset != b.recv.offset) {
    r.Fail("allReduce: send and recv partially overlap; use the same tensor for in place.");
  }
  Desc d;
  d.op = CollOp::kAllReduce;
  d.dtype = t;
  d.count = count;
  d.red = op;
  d.send = b.send.ptr();
  d.recv = b.recv.ptr();
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// broadcast(send, sendOffset, recv, recvOffset, count, dtype, root, stream, token)
Napi::Value CommWrap::Broadcast(Reader& r) {
  uint64_t count = r.At(4).Index("count");
  DType t = CommDtype(r);
  uint64_t root = r.Index("root");
  if (root >= static_cast<uint64_t>(impl_->size)) {
    r.Fail("broadcast: root " + std::to_string(root) + " out of range [0, " + std::to_string(impl_->size) + ").",
           {Str("argument", "root")});
  }
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t bytes = Mul(count, DTypeSize(t));
  SendRecv b = ReadSendRecv(r, bytes, bytes, DTypeSize(t));
  if (Overlaps(b.send, b.recv) && b.send.offset != b.recv.offset) r.Fail("broadcast: send and recv partially overlap.");
  Desc d;
  d.op = CollOp::kBroadcast;
  d.dtype = t;
  d.count = count;
  d.root = static_cast<int>(root);
  d.send = b.send.ptr();
  d.recv = b.recv.ptr();
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// allGather(send, sendOffset, recv, recvOffset, count, dtype, stream, token): recv holds size * count.
Napi::Value CommWrap::AllGather(Reader& r) {
  uint64_t count = r.At(4).Index("count");
  DType t = CommDtype(r);
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t bytes = Mul(count, DTypeSize(t));
  SendRecv b = ReadSendRecv(r, bytes, Mul(bytes, impl_->size), DTypeSize(t));
  if (Overlaps(b.send, b.recv) && b.send.offset != b.recv.offset + impl_->rank * bytes) {
    r.Fail("allGather: in place requires send == recv chunk of this rank.");
  }
  Desc d;
  d.op = CollOp::kAllGather;
  d.dtype = t;
  d.count = count;
  d.send = b.send.ptr();
  d.recv = b.recv.ptr();
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// reduceScatter(send, sendOffset, recv, recvOffset, count, dtype, op, stream, token): send holds size * count.
Napi::Value CommWrap::ReduceScatter(Reader& r) {
  uint64_t count = r.At(4).Index("count");
  DType t = CommDtype(r);
  RedOp op = ReadRedOp(r);
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t bytes = Mul(count, DTypeSize(t));
  SendRecv b = ReadSendRecv(r, Mul(bytes, impl_->size), bytes, DTypeSize(t));
  if (Overlaps(b.send, b.recv) && b.recv.offset != b.send.offset + impl_->rank * bytes) {
    r.Fail("reduceScatter: in place requires recv == send chunk of this rank.");
  }
  Desc d;
  d.op = CollOp::kReduceScatter;
  d.dtype = t;
  d.count = count;
  d.red = op;
  d.send = b.send.ptr();
  d.recv = b.recv.ptr();
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// allToAll(send, sendOffset, recv, recvOffset, count, dtype, stream, token): count per peer.
Napi::Value CommWrap::AllToAll(Reader& r) {
  uint64_t count = r.At(4).Index("count");
  DType t = CommDtype(r);
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t bytes = Mul(Mul(count, DTypeSize(t)), impl_->size);
  SendRecv b = ReadSendRecv(r, bytes, bytes, DTypeSize(t));
  Desc d;
  d.op = CollOp::kAllToAll;
  d.dtype = t;
  d.count = count;
  d.send = b.send.ptr();
  d.recv = b.recv.ptr();
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// allToAllV(send, sendOffset, sendCounts, sendDispls, recv, recvOffset, recvCounts, recvDispls, dtype, stream, token)
Napi::Value CommWrap::AllToAllV(Reader& r) {
  const int P = impl_->size;
  std::vector<uint64_t> sc = r.At(2).Counts("sendCounts", P), sd = r.Counts("sendDispls", P);
  std::vector<uint64_t> rc = r.At(6).Counts("recvCounts", P), rd = r.Counts("recvDispls", P);
  DType t = CommDtype(r);
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  uint64_t send_end = 0, recv_end = 0;
  for (int q = 0; q < P; ++q) {
    send_end = std::max(send_end, sd[q] + sc[q]);
    recv_end = std::max(recv_end, rd[q] + rc[q]);
  }
  Span send = r.At(0).Buffer("send", Mul(send_end, DTypeSize(t)), DTypeSize(t));
  Span recv = r.At(4).Buffer("recv", Mul(recv_end, DTypeSize(t)), DTypeSize(t));
  Desc d;
  d.op = CollOp::kAllToAllV;
  d.dtype = t;
  d.send = send.ptr();
  d.recv = recv.ptr();
  d.send_counts = std::move(sc);
  d.send_displs = std::move(sd);
  d.recv_counts = std::move(rc);
  d.recv_displs = std::move(rd);
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, r.Blocks()));
}

// barrier(stream, token)
Napi::Value CommWrap::Barrier(Reader& r) {
  StreamImpl& s = ReadStream(r);
  uint64_t token = r.Token();
  Desc d;
  d.op = CollOp::kBarrier;
  return Seq(r, EnqueueCollective(r.Env(), s, std::move(d), token, {}));
}

// ---------------------------------------------------------------- P2P and groups

// send|recv(buffer, offset, count, dtype, peer, stream, token) -> seq, or 0 inside a group.
Napi::Value CommWrap::P2P(Reader& r, bool is_send) {
  const char* what = is_send ? "send" : "recv";
  CommImpl& c = *impl_;
  uint64_t count = r.At(2).Index("count");
  DType t = CommDtype(r);
  uint64_t peer = r.Index("peer");
  if (peer >= static_cast<uint64_t>(c.size) || static_cast<int>(peer) == c.rank) {
    r.Fail(std::string(what) + ": expected a peer in [0, " + std::to_string(c.size) + ") other than rank " +
               std::to_string(c.rank) + " but received " + std::to_string(peer) + ".",
           {Str("argument", "peer")});
  }
  Napi::Object js;
  StreamImpl& s = ReadStream(r, &js);
  uint64_t token = r.Token();
  Span buf = r.At(0).Buffer(what, Mul(count, DTypeSize(t)), DTypeSize(t));
  if (c.group_depth > 0 && c.group_stream != nullptr && c.group_stream != &s) {
    r.Fail("Every send/recv between groupStart() and groupEnd() must use the same stream.");
  }
  if (c.sends_to.empty()) {
    c.sends_to.assign(c.size, 0);
    c.recvs_from.assign(c.size, 0);
  }
  uint64_t k = ++(is_send ? c.sends_to : c.recvs_from)[peer];
  P2PItem item{is_send, static_cast<int>(peer), k, buf.ptr(), count, t};
  if (c.group_depth > 0) {
    if (c.group_stream == nullptr) {
      c.group_stream = &s;
      c.group_stream_ref = Napi::Persistent(js);
    }
    c.group_items.push_back(item);
    c.group_keep.push_back(buf.block);
    return Seq(r, 0);
  }
  std::string desc = std::string(what) + " #" + std::to_string(k) + (is_send ? " to " : " from ") +
                     c.group->Who(static_cast<int>(peer));
  std::string fp = std::string(what) + "(" + DTypeName(t) + ", count=" + std::to_string(count) +
                   (is_send ? ", to=" : ", from=") + std::to_string(peer) + ", k=" + std::to_string(k) + ")";
  std::shared_ptr<CommGroup> group = c.group;
  int rank = c.rank;
  double timeout = c.exec_timeout_ms;
  Work w{what, 0, fp, token, r.Blocks(), timeout,
         [group, rank, timeout, item, desc](Clock::time_point deadline) {
           if (group->aborted()) group->ThrowAborted(rank, kNoSeq, desc);
           group->p2p().Run(*group, rank, {item}, false, deadline, timeout, desc);
         }};
  return Seq(r, Submit(r.Env(), &s, std::move(w)));
}

Napi::Value CommWrap::Send(Reader& r) { return P2P(r, true); }
Napi::Value CommWrap::Recv(Reader& r) { return P2P(r, false); }

Napi::Value CommWrap::GroupStart(Reader& r) {
  ++impl_->group_depth;
  return r.Env().Undefined();
}

// groupEnd(token) -> seq of the one op running the whole group, or 0 when nothing
// was enqueued (nested end, or an empty group: the token is then unused). The group
// closes before the usability check, so an aborted communicator leaves no open group.
Napi::Value CommWrap::GroupEnd(Reader& r) {
  CommImpl& c = *impl_;
  if (c.group_depth == 0) r.Fail("groupEnd() without a matching groupStart().");
  uint64_t token = r.Token();
  if (--c.group_depth > 0 || c.group_items.empty()) return Seq(r, 0);
  std::vector<P2PItem> items = std::move(c.group_items);
  std::vector<std::shared_ptr<Block>> keep = std::move(c.group_keep);
  StreamImpl* s = c.group_stream;
  c.group_items.clear();
  c.group_keep.clear();
  c.group_stream = nullptr;
  Napi::ObjectReference ref = std::move(c.group_stream_ref);
  CheckUsable("groupEnd");
  if (s->stopped()) s->Enqueue(nullptr);
  std::string fp = "group(";
  for (size_t i = 0; i < items.size(); ++i) {
    const P2PItem& it = items[i];
    fp += std::string(i ? ", " : "") + (it.is_send ? "send " : "recv ") + DTypeName(it.dtype) + "x" +
          std::to_string(it.count) + (it.is_send ? " to=" : " from=") + std::to_string(it.peer) + " k=" +
          std::to_string(it.k);
  }
  fp += ")";
  std::shared_ptr<CommGroup> group = c.group;
  int rank = c.rank;
  double timeout = c.exec_timeout_ms;
  std::string desc = "groupEnd of " + std::to_string(items.size()) + " send/recv";
  Work w{"groupEnd", 0, fp, token, std::move(keep), timeout,
         [group, rank, timeout, items, desc](Clock::time_point deadline) {
           if (group->aborted()) group->ThrowAborted(rank, kNoSeq, desc);
           group->p2p().Run(*group, rank, items, true, deadline, timeout, desc);
         }};
  return Seq(r, Submit(r.Env(), s, std::move(w)));
}

// ---------------------------------------------------------------- split, abort, destroy

// split(color, key, connectTimeoutMs, execTimeoutMs, traceDir, token) -> Communicator
// (pending until the token completes; size 0 when color < 0).
Napi::Value CommWrap::Split(Reader& r) {
  int color = static_cast<int>(r.Int("color"));
  if (color < -1) r.Fail("split: color must be a non-negative integer or -1 (no communicator).", {Str("argument", "color")});
  int key = static_cast<int>(r.Int("key"));
  double connect_ms = r.Timeout("connectTimeoutMs");
  double exec_ms = r.Timeout("execTimeoutMs");
  std::string trace_dir = r.String("traceDir");
  uint64_t token = r.Token();
  CommImpl& c = *impl_;
  auto child = std::make_shared<CommImpl>();
  child->device = c.device;
  child->exec_timeout_ms = exec_ms;
  child->connect_timeout_ms = connect_ms;
  child->trace_dir = trace_dir;
  Napi::Object obj = NewInstance(r.Env(), child);
  Desc d;
  d.op = CollOp::kSplit;
  d.color = color;
  d.key = key;
  Stamp(d);
  // MPI_Comm_split over the parent: the collective gathers every rank's (color, key)
  // and orders each color's members by key, then parent rank; color -1 gets none.
  // The split is a rendezvous, so the whole of it (the collective and the child's
  // join) runs under the connect timeout (its own connectTimeoutMs option, else the
  // parent's, else HCCL_CONNECT_TIMEOUT), like init, on a thread rather than a stream.
  std::shared_ptr<CommGroup> parent = c.group;
  const int prank = c.rank;
  Work w{"split", d.seq, d.fingerprint, token, {}, connect_ms,
         [parent, prank, d, child, connect_ms, trace_dir](Clock::time_point deadline) mutable {
           SplitResult res;
           RunCollective(*parent, prank, d, deadline, connect_ms, &res, "connectTimeoutMs / HCCL_CONNECT_TIMEOUT");
           if (d.color < 0) return;
           std::shared_ptr<CommGroup> g = GroupTable::Get().Join(ChildId(parent->id(), d.seq, d.color), res.new_size, res.new_rank,
                                                                 child->device, trace_dir, res.member_world_ranks, false);
           {
             std::lock_guard<std::mutex> lock(child->mu);
             child->group = g;
             child->rank = res.new_rank;
             child->size = res.new_size;
           }
           g->WaitAllJoined(res.new_rank, deadline, connect_ms);
           child->ready.store(true, std::memory_order_release);
         }};
  Submit(r.Env(), nullptr, std::move(w));
  return obj;
}

// abort(reason)
Napi::Value CommWrap::Abort(Reader& r) {
  std::string reason = r.String("reason");
  std::shared_ptr<CommGroup> g;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    g = impl_->group;
  }
  if (!g) return r.Env().Undefined();
  ErrorInfo e{kCommAborted, g->Who(impl_->rank) + " called abort(): " + reason,
              {Num("abortedBy", g->WorldRank(impl_->rank)), Str("reason", reason)}};
  g->SetCulprits(e, {impl_->rank});  // the rank that gave up (e.g. its stream failed)
  g->Abort(std::move(e), 0, g->AnyInFlight());
  return r.Env().Undefined();
}

// Local: later calls on this rank's communicator fail; ops in flight keep the
// shared group alive until they finish.
Napi::Value CommWrap::Destroy(Reader& r) {
  impl_->destroyed = true;
  return r.Env().Undefined();
}

Napi::Value CommWrap::FlightRecord(Reader& r) {
  std::shared_ptr<CommGroup> g;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    g = impl_->group;
  }
  if (!g) r.Fail("The communicator is not initialised; flightRecord() needs the Communicator that initRank() / split() resolved to.");
  return Napi::String::New(r.Env(), g->DumpJson());
}

}  // namespace comm

}  // namespace ascent
