#include "device/stream.h"

#include <algorithm>

#include "env_data.h"
#include "op_table.h"
#include "type_tags.h"

namespace ascent {

namespace {
// Thrown inside an op interrupted by Stop(); never reaches JS.
struct Interrupted {};
}  // namespace

StreamImpl::StreamImpl(uint64_t id, Device& device, EnvData* env) : id_(id), device_(device), env_(env) {}

StreamImpl::~StreamImpl() { Stop(); }

void StreamImpl::Start() { thread_ = std::thread([this] { Loop(); }); }

uint64_t StreamImpl::Enqueue(std::unique_ptr<Op> op) {
  uint64_t seq;
  if (op && op->may_inline && TryRunInline(*op, &seq)) return seq;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (queue_.size() >= kMaxQueued && !stopping_ && !drain_exit_ && std::this_thread::get_id() != thread_.get_id()) {
      space_cv_.wait_for(lock, std::chrono::seconds(10),
                         [&] { return stopping_ || drain_exit_ || sticky_.has_value() || queue_.size() < kMaxQueued; });
    }
    if (stopping_ || drain_exit_) {
      ThrowInvalidArgument("Stream " + std::to_string(id_) + " (device " + std::to_string(device_.ordinal) +
                               ") was destroyed. HINT: create a new stream with device.newStream().",
                           {Num("stream", static_cast<double>(id_)), Num("device", device_.ordinal)});
    }
    seq = next_seq_++;
    op->seq = seq;
    queue_.push_back(std::move(op));
  }
  cv_.notify_all();
  return seq;
}

ErrorInfo StreamImpl::DestroyedError(const Op& op) const {
  return ErrorInfo{kStreamError,
                   "Stream " + std::to_string(id_) + " (device " + std::to_string(device_.ordinal) +
                       ") was destroyed before op #" + std::to_string(op.seq) + " '" + op.name + "' completed.",
                   {Num("stream", static_cast<double>(id_)), Num("device", device_.ordinal),
                    Num("seq", static_cast<double>(op.seq)), Str("op", op.name)}};
}

void StreamImpl::Stop() {
  std::deque<std::unique_ptr<Op>> dropped;
  std::shared_ptr<EventState> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    dropped.swap(queue_);
    waiting = waiting_on_;
  }
  cv_.notify_all();
  space_cv_.notify_all();
  if (waiting) {
    std::lock_guard<std::mutex> lock(waiting->mu);
    waiting->cv.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  // Ops that finished before the stop: their held-back completions first, in seq order.
  FlushDeferred();
  for (auto& op : dropped) {
    // Dropped, so never run: a collective tells its peers now (see Op::on_skip).
    if (op->on_skip) {
      try {
        op->on_skip(DestroyedError(*op));
      } catch (...) {
        // As in Loop(): the drop is reported below either way.
      }
    }
    if (op->token != 0) {
      auto c = std::make_unique<Completion>();
      c->token = op->token;
      c->ok = false;
      c->error = DestroyedError(*op);
      env_->Post(std::move(c));
    }
  }
}

void StreamImpl::RequestDrainExit() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    drain_exit_ = true;
  }
  cv_.notify_all();
}

bool StreamImpl::stopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_ || drain_exit_;
}

bool StreamImpl::TryRunInline(Op& op, uint64_t* seq) {
  std::chrono::steady_clock::time_point started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() || busy_ || inline_running_ || stopping_ || drain_exit_ || sticky_.has_value() ||
        std::this_thread::get_id() == thread_.get_id()) {
      return false;
    }
    *seq = next_seq_++;
    op.seq = *seq;
    inline_running_ = true;
    running_name_ = op.name;
    running_seq_ = *seq;
    // The start time feeds the op's profile record and Pending()'s runningMs. Pending() is a
    // method of this env's Stream, whose JS thread is busy running this op until it finished,
    // so only a profile can see the time: the clock is read only when profiling (a vDSO call
    // per small op otherwise).
    if (profiling_.load(std::memory_order_relaxed)) running_since_ = started = std::chrono::steady_clock::now();
  }
  Outcome o = Execute(op, false, started);
  Finish(op, o, true);
  return true;
}

StreamImpl::Outcome StreamImpl::Execute(Op& op, bool skip, std::chrono::steady_clock::time_point started) {
  Outcome o;
  // An inline op started while profiling was off has no start time (TryRunInline): unrecorded.
  o.profiled = profiling_.load(std::memory_order_relaxed) && !skip && started.time_since_epoch().count() != 0;
  if (o.profiled) o.start_us = std::chrono::duration<double, std::micro>(started.time_since_epoch()).count();
  if (skip) {
    o.skipped = true;
    return o;
  }
  try {
    if (op.run_ref != nullptr) {
      op.run_ref(op.run_ctx, op);
    } else {
      op.run(op);
    }
  } catch (const Interrupted&) {
    o.interrupted = true;
  } catch (const AscentException& e) {
    o.failure = e.info();
  } catch (const std::exception& e) {
    o.failure = ErrorInfo{kStreamError, e.what(), {}};
  }
  return o;
}

void StreamImpl::Finish(Op& op, const Outcome& o, bool was_inline) {
  bool wake = false;
  bool defer = false;
  std::unique_ptr<Completion> c;
  std::vector<std::unique_ptr<Completion>> flush;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (o.failure && !sticky_) {
      sticky_ = ErrorInfo{
          kStreamError,
          "Stream " + std::to_string(id_) + " (device " + std::to_string(device_.ordinal) + ") failed in op #" +
              std::to_string(op.seq) + " '" + op.name + "': " + o.failure->message +
              " Later work on this stream was skipped. HINT: fix the failing op and use a new stream.",
          {Num("stream", static_cast<double>(id_)), Num("device", device_.ordinal),
           Num("seq", static_cast<double>(op.seq)), Str("op", op.name), Str("causeCode", o.failure->code),
           Str("causeMessage", o.failure->message)}};
    }
    if (o.profiled) {
      if (profile_.size() < kMaxProfileRecords) {
        profile_.push_back(ProfileRecord{op.seq, op.name, o.start_us, SteadyNowUs(), op.profile_args});
      } else {
        ++profile_dropped_;
      }
    }
    running_seq_ = 0;
    ++completed_;
    if (was_inline) {
      inline_running_ = false;
      ++inlined_;
      wake = !queue_.empty() || drain_exit_;  // ops other threads enqueued meanwhile
    } else if (queue_.empty()) {
      // Idle from here, before the completion is posted: a host that saw this op complete and
      // enqueues at once finds the stream idle, whether or not this thread has looped back yet
      // (otherwise the next op would queue or run inline depending on the scheduler).
      busy_ = false;
    }
    if (op.token != 0) {
      c = std::make_unique<Completion>();
      c->token = op.token;
      if (o.interrupted) {
        c->ok = false;
        c->error = DestroyedError(op);
      } else if (sticky_) {
        c->ok = false;
        c->error = *sticky_;
        // Queued behind the failure and never run: said so, with the op that was skipped.
        if (o.skipped) {
          c->error.details.push_back(Str("skippedOp", op.name));
          c->error.details.push_back(Num("skippedSeq", static_cast<double>(op.seq)));
        }
      } else if (op.has_result) {
        c->has_bytes = true;
        c->bytes = std::move(op.result);
      }
    }
    // Batched completions (stream.h): a success is held back while a batchable op runs next;
    // anything else posts what is held, then its own.
    if (!was_inline) {
      const auto now = std::chrono::steady_clock::now();
      const bool fresh = deferred_.empty() ||
                         std::chrono::duration<double, std::milli>(now - deferred_since_).count() < kMaxDeferMs;
      defer = !o.interrupted && !sticky_ && !queue_.empty() && queue_.front()->batchable &&
              deferred_.size() < kMaxDeferred && fresh;
      if (defer && c) {
        if (deferred_.empty()) deferred_since_ = now;
        deferred_.push_back(std::move(c));
      } else if (!defer) {
        flush.swap(deferred_);
      }
    }
  }
  // Drops the op's block references outside the stream lock, and before its completion is
  // posted: a host that saw the op complete sees its memory released too.
  op.run = nullptr;
  op.run_ref = nullptr;
  op.keep.clear();
  op.on_skip = nullptr;
  if (flush.size() + (c ? 1 : 0) > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    ++batched_posts_;
  }
  for (auto& f : flush) env_->Post(std::move(f));
  if (c) {
    // An inline op ran on its env's JS thread, inside the enqueue call that now takes this.
    if (was_inline) {
      env_->StoreInline(std::move(c));
    } else {
      env_->Post(std::move(c));
    }
  }
  if (wake) cv_.notify_all();
}

void StreamImpl::FlushDeferred() {
  std::vector<std::unique_ptr<Completion>> flush;
  {
    std::lock_guard<std::mutex> lock(mu_);
    flush.swap(deferred_);
    if (flush.size() > 1) ++batched_posts_;
  }
  for (auto& f : flush) env_->Post(std::move(f));
}

namespace {
// The stream whose thread this is (null on every other thread): FlushStreamCompletions() finds it here.
thread_local StreamImpl* t_stream = nullptr;
}  // namespace

void FlushStreamCompletions() {
  if (t_stream != nullptr) t_stream->FlushDeferred();
}

void StreamImpl::Loop() {
  t_stream = this;
  for (;;) {
    std::unique_ptr<Op> op;
    std::chrono::steady_clock::time_point started;
    bool skip;
    std::optional<ErrorInfo> cause;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // The previous op is done (its completion posted, or held back for the batchable op this
      // thread takes below under the same lock, so no enqueue sees it idle): an enqueue may run
      // inline once the queue is empty.
      busy_ = false;
      cv_.wait(lock, [&] { return stopping_ || (!inline_running_ && (!queue_.empty() || drain_exit_)); });
      if (stopping_ || queue_.empty()) break;
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      if (queue_.size() + 1 == kMaxQueued) space_cv_.notify_all();  // just came under the bound
      running_name_ = op->name;
      running_seq_ = op->seq;
      running_since_ = started = std::chrono::steady_clock::now();
      skip = sticky_.has_value();
      if (skip && op->on_skip) cause = sticky_;
    }
    if (cause) {
      try {
        op->on_skip(*cause);
      } catch (...) {
        // A skip hook reports what it can; the op is reported as skipped either way.
      }
    }
    Outcome o = Execute(*op, skip, started);
    const bool interrupted = o.interrupted;
    Finish(*op, o, false);
    op.reset();
    if (interrupted) break;
  }
  exited_ = true;
}

bool StreamImpl::Sleep(double ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return stopping_.load(); });
  if (stopping_) throw Interrupted{};
  return true;
}

bool StreamImpl::WaitEvent(const std::shared_ptr<EventState>& event, uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Interrupted{};
    waiting_on_ = event;
  }
  {
    std::unique_lock<std::mutex> lock(event->mu);
    event->cv.wait(lock, [&] { return event->completed >= generation || stopping_.load(); });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_on_.reset();
  }
  if (stopping_) throw Interrupted{};
  return true;
}

std::vector<PendingOp> StreamImpl::Pending() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PendingOp> out;
  if (running_seq_ != 0) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - running_since_).count();
    out.push_back(PendingOp{running_seq_, running_name_, true, ms});
  }
  for (auto& op : queue_) out.push_back(PendingOp{op->seq, op->name, false, 0});
  return out;
}

uint64_t StreamImpl::enqueued() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_ - 1;
}

uint64_t StreamImpl::completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

uint64_t StreamImpl::batched() {
  std::lock_guard<std::mutex> lock(mu_);
  return batched_posts_;
}

uint64_t StreamImpl::inlined() {
  std::lock_guard<std::mutex> lock(mu_);
  return inlined_;
}

std::optional<ErrorInfo> StreamImpl::sticky_error() {
  std::lock_guard<std::mutex> lock(mu_);
  return sticky_;
}

}  // namespace ascent

namespace ascent {

Napi::Function StreamWrap::Define(Napi::Env env) {
  std::vector<PropertyDescriptor> props = {InstanceAccessor<&StreamWrap::GetId>("id"),
                                           InstanceAccessor<&StreamWrap::GetDevice>("device"),
                                           InstanceMethod<&StreamWrap::Pending>("pending"),
                                           InstanceMethod<&StreamWrap::Stats>("stats"),
                                           InstanceMethod<&StreamWrap::Destroy>("destroy"),
                                           InstanceMethod<&StreamWrap::Profile>("profile"),
                                           InstanceMethod<&StreamWrap::DrainProfile>("drainProfile"),
                                           StaticMethod<&StreamWrap::NowUs>("nowUs"),
                                           InstanceMethod<&StreamWrap::ModelOp>("modelOp")};
  Napi::Function cls = DefineClass(env, "Stream", props);
  // The base ops as raw callbacks on the prototype (see RunOp), with the attributes an
  // InstanceMethod gets (not writable, enumerable or configurable).
  std::vector<napi_property_descriptor> ops;
  for (const OpRow& row : BaseOps()) {
    ops.push_back({row.name, nullptr, &StreamWrap::RunOp, nullptr, nullptr, nullptr, napi_default, const_cast<OpRow*>(&row)});
  }
  Napi::Object proto = cls.Get("prototype").As<Napi::Object>();
  if (napi_define_properties(env, proto, ops.size(), ops.data()) != napi_ok) {
    throw Napi::Error::New(env, "Internal: defining the Stream ops failed.");
  }
  return cls;
}

StreamWrap::StreamWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<StreamWrap>(info) {
  info.This().As<Napi::Object>().TypeTag(&kStreamTag);
  Guard(info.Env(), [&] {
    EnvData* data = EnvData::Get(info.Env());
    if (!data->initialized()) ThrowInvalidArgument("The native addon was not initialised. HINT: load it through loadNative().");
    if (info.Length() < 1 || !info[0].IsNumber()) ThrowInvalidArgument("Expected a device ordinal for new Stream().");
    Device& device = Registry::Get().Existing(info[0].As<Napi::Number>().Int32Value());
    impl_ = std::make_shared<StreamImpl>(Registry::Get().NextId(), device, data);
    impl_->Start();
    data->AddStream(impl_);
  });
}

// A collected wrapper lets queued work finish; the env reaps the thread later.
StreamWrap::~StreamWrap() {
  if (impl_) impl_->RequestDrainExit();
}

Napi::Value StreamWrap::GetId(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(impl_->id()));
}

Napi::Value StreamWrap::GetDevice(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), impl_->device().ordinal);
}

Napi::Value StreamWrap::Pending(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<PendingOp> ops = impl_->Pending();
  Napi::Array out = Napi::Array::New(env, ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("seq", Napi::Number::New(env, static_cast<double>(ops[i].seq)));
    o.Set("op", Napi::String::New(env, ops[i].name));
    o.Set("state", Napi::String::New(env, ops[i].running ? "running" : "queued"));
    o.Set("runningMs", Napi::Number::New(env, ops[i].running_ms));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

Napi::Value StreamWrap::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("enqueued", Napi::Number::New(env, static_cast<double>(impl_->enqueued())));
  o.Set("completed", Napi::Number::New(env, static_cast<double>(impl_->completed())));
  o.Set("inlined", Napi::Number::New(env, static_cast<double>(impl_->inlined())));
  o.Set("batched", Napi::Number::New(env, static_cast<double>(impl_->batched())));
  o.Set("destroyed", Napi::Boolean::New(env, impl_->stopped()));
  std::optional<ErrorInfo> sticky = impl_->sticky_error();
  o.Set("error", sticky ? MakeJsError(env, *sticky) : env.Null());
  return o;
}

Napi::Value StreamWrap::Destroy(const Napi::CallbackInfo& info) {
  impl_->Stop();
  return info.Env().Undefined();
}

}  // namespace ascent

namespace ascent {

double SteadyNowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<ProfileRecord> StreamImpl::DrainProfile(uint64_t* dropped) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProfileRecord> out;
  out.swap(profile_);
  // While profiling stays on, the next records get the room these took: growing the vector from
  // empty again reallocated and moved it ~log2(n) times per drain, with the calling thread's op
  // (an inline one) waiting, and made up most of the allocator's time in a profiled loop of small ops.
  if (profiling_.load(std::memory_order_relaxed)) profile_.reserve(std::min(out.size(), kReservedProfileRecords));
  *dropped = profile_dropped_;
  profile_dropped_ = 0;
  return out;
}

// profile(on: boolean): record every op this stream runs from now on (or stop).
Napi::Value StreamWrap::Profile(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsBoolean()) {
    Napi::TypeError::New(info.Env(), "profile(on) expects a boolean.").ThrowAsJavaScriptException();
    return info.Env().Undefined();
  }
  impl_->SetProfiling(info[0].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

// drainProfile(): { seq: Float64Array, start: Float64Array, end: Float64Array, names: string[], args, dropped } of the ops
// run since the last drain; args[i] is an object of op i's extra trace args, or undefined (most ops have none).
Napi::Value StreamWrap::DrainProfile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t dropped = 0;
  std::vector<ProfileRecord> recs = impl_->DrainProfile(&dropped);
  const size_t n = recs.size();
  Napi::Float64Array seq = Napi::Float64Array::New(env, n), start = Napi::Float64Array::New(env, n),
                     end = Napi::Float64Array::New(env, n);
  Napi::Array names = Napi::Array::New(env, n), args = Napi::Array::New(env, n);
  for (size_t i = 0; i < n; ++i) {
    if (!recs[i].args.empty()) {
      Napi::Object a = Napi::Object::New(env);
      for (const auto& kv : recs[i].args) a.Set(kv.first, Napi::Number::New(env, kv.second));
      args.Set(static_cast<uint32_t>(i), a);
    }
    seq[i] = static_cast<double>(recs[i].seq);
    start[i] = recs[i].start_us;
    end[i] = recs[i].end_us;
    names.Set(static_cast<uint32_t>(i), Napi::String::New(env, recs[i].name));
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("seq", seq);
  out.Set("start", start);
  out.Set("end", end);
  out.Set("names", names);
  out.Set("args", args);
  out.Set("dropped", Napi::Number::New(env, static_cast<double>(dropped)));
  return out;
}

Napi::Value StreamWrap::NowUs(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), SteadyNowUs()); }

}  // namespace ascent
