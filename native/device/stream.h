// A stream is a FIFO of ops run by its own std::thread (never libuv's pool).
// Enqueue returns at once. An op that throws records a sticky error: every later
// op is skipped and every completion token reports that error. Stop() wakes a
// sleeping or event-waiting op promptly, drops queued ops and joins the thread.
//
// Batched completions: an op marked batchable (a collective) may run while the completions
// of the ops before it are held back (deferred_) instead of posted one by one: every posted
// completion wakes the enqueueing JS thread (eventfd, epoll, N-API callback, promise
// reactions), and back-to-back collectives on 16 ranks spent most of their cycle on those
// wake-ups (4 KiB allReduce: 108 us without completions, 276-501 us with one per op). The
// held completions are posted, in seq order, in one run (one wake-up) when: the stream has
// nothing batchable queued next (idle, or a kernel / wait / copy follows), an op fails or is
// skipped (fail-fast: an error is never held back), kMaxDeferred are held or the oldest is
// kMaxDeferMs old, the stream is stopped, or the running op is about to block or to work for
// long (FlushStreamCompletions(): a collective's wait past kFlushGraceMs, a large
// collective's data movement). The last rule keeps a host that awaits op i (and only then
// lets a peer make progress) from waiting on op i+1: op i's completion is late by at most
// the grace, never lost.
//
// Inline ops: an op marked may_inline (a small kernel or copy, never a sleep, an event
// wait or a collective) that finds its stream idle (nothing queued, nothing running, no
// sticky error) runs on the enqueueing thread inside Enqueue, with the same seq, error
// reporting, profile record and completion as on the stream thread. Stream order holds:
// everything enqueued before it has finished, and ops enqueued while it runs wait in the
// queue, which the stream thread does not touch until it is done. Waking the stream thread
// for such an op cost a futex wake and a context switch each way (28 us enqueue to
// completion for an empty kernel, 5.5 us per op back to back), more than the kernel.
#pragma once

#include <napi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/buffer.h"
#include "device/event.h"
#include "errors.h"

namespace ascent {

class EnvData;

struct Completion;

struct Op {
  uint64_t seq = 0;
  std::string name;
  uint64_t token = 0;  // 0: nobody awaits this op
  std::function<void(Op&)> run;
  // Instead of `run`: a callable the enqueueing call owns, for an op run inline from inside that
  // call (EnqueueOp, op_table.h). No std::function is built, so such an op allocates nothing.
  void (*run_ref)(void* ctx, Op& op) = nullptr;
  void* run_ctx = nullptr;
  std::vector<std::shared_ptr<Block>> keep;  // blocks stay alive until the op is done
  bool has_result = false;
  std::vector<uint8_t> result;  // device->host bytes
  bool may_inline = false;      // may run on the enqueueing thread when the stream is idle
  // May run while earlier completions are held back (see "Batched completions" above): the op
  // is short, or calls FlushStreamCompletions() before it blocks or works for long.
  bool batchable = false;
  // Runs on the stream thread instead of `run` when the op is skipped because the stream
  // failed earlier (or in Stop() when the op is dropped unrun) (a collective aborts its communicator here, so its peers fail at once
  // rather than wait for it until their deadline, whether or not a host awaits this op).
  std::function<void(const ErrorInfo& sticky)> on_skip;
  // Extra args of the op's trace event (names are string literals), e.g. a batched copy's
  // range count and bytes: one event stands for many, and the profile should say how many.
  std::vector<std::pair<const char*, double>> profile_args;
};

// Posts the completions the calling stream thread holds back (no-op on any other thread).
// Ops that may block call it before they do (see "Batched completions").
void FlushStreamCompletions();

// One executed op, for the profiler (steady-clock microseconds, the clock of StreamWrap.nowUs()).
struct ProfileRecord {
  uint64_t seq;
  std::string name;
  double start_us;
  double end_us;
  std::vector<std::pair<const char*, double>> args;  // Op::profile_args
};

struct PendingOp {
  uint64_t seq;
  std::string name;
  bool running;
  double running_ms;
};

class StreamImpl {
 public:
  StreamImpl(uint64_t id, Device& device, EnvData* env);
  ~StreamImpl();

  uint64_t id() const { return id_; }
  Device& device() const { return device_; }

  void Start();
  // Throws InvalidArgument when the stream was destroyed. Returns the op's seq.
  uint64_t Enqueue(std::unique_ptr<Op> op);
  // Runs op on the calling thread if the stream is idle; false (op untouched) otherwise.
  // Enqueue tries it first for a may_inline op. The op may live on the caller's stack: once it
  // ran, its run closure and keep list are cleared (the blocks they held are let go).
  bool TryRunInline(Op& op, uint64_t* seq);
  void Stop();
  // The thread exits once the queue is empty (wrapper collected); Stop() reaps it.
  void RequestDrainExit();
  bool exited() const { return exited_.load(); }
  bool stopped();

  std::vector<PendingOp> Pending();
  uint64_t enqueued();
  uint64_t completed();
  uint64_t inlined();  // ops that ran on their enqueueing thread
  uint64_t batched();  // runs of held-back completions posted together
  std::optional<ErrorInfo> sticky_error();

  // Profiling: when on, every executed op is recorded (at most kMaxProfileRecords between drains).
  void SetProfiling(bool on) { profiling_.store(on); }
  std::vector<ProfileRecord> DrainProfile(uint64_t* dropped);
  static constexpr size_t kMaxProfileRecords = 1 << 20;
  // At most this many records' room is kept across a drain (see DrainProfile).
  static constexpr size_t kReservedProfileRecords = 1 << 14;

  // Held-back completions (see "Batched completions" above).
  static constexpr size_t kMaxDeferred = 128;
  static constexpr double kMaxDeferMs = 5;
  // Posts every held-back completion, in seq order.
  void FlushDeferred();

  // Stream-thread helpers: return false when interrupted by Stop().
  bool Sleep(double ms);
  bool WaitEvent(const std::shared_ptr<EventState>& event, uint64_t generation);

 private:
  void Loop();
  ErrorInfo DestroyedError(const Op& op) const;
  // How one op ran, from Execute() to Finish().
  struct Outcome {
    bool interrupted = false;
    bool skipped = false;
    bool profiled = false;
    double start_us = 0;
    std::optional<ErrorInfo> failure;
  };
  // Runs op (unless skip); never throws. `started` is when it was taken (running_since_), which
  // is also its profile record's start: one clock read per op, not two.
  Outcome Execute(Op& op, bool skip, std::chrono::steady_clock::time_point started);
  // Bookkeeping after an op ran (sticky error, profile, counters, completion); the
  // stream thread and the inline path share it so both report alike. Drops what the op holds
  // (its closure, its keep list) before the completion is posted; the caller frees the Op.
  void Finish(Op& op, const Outcome& o, bool was_inline);

  const uint64_t id_;
  Device& device_;
  EnvData* const env_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Run-ahead bound: an enqueue that finds kMaxQueued ops waiting blocks (in the kernel)
  // until the stream thread has run one of them, for at most 10 s (then it enqueues anyway:
  // a throttle, never a hang). Without it a host thread that never synchronizes (a training
  // loop that does not read its loss) queued steps ahead, every queued step's activations
  // stayed allocated until its ops ran, and each step's outputs landed on fresh pages:
  // zeroing them took half of the CPU (perf: clear_page_erms under do_huge_pmd_anonymous_page)
  // and a tiny model's step ran 4x slower than when synchronized each step. CUDA bounds its
  // launch queue the same way. No hysteresis: waiting until the queue had drained to half
  // (128) held a rank's JS thread ~0.45 s at a time in the 16-rank quickstart, whose trainer
  // streams reach 300-400 waiting ops, while its collectives need every rank's host to keep
  // enqueueing; resuming after one op keeps the single-device gain (dense step ~1x PyTorch).
  std::condition_variable space_cv_;
  static constexpr size_t kMaxQueued = 256;
  std::deque<std::unique_ptr<Op>> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> exited_{false};
  bool drain_exit_ = false;
  bool stopped_ = false;
  uint64_t next_seq_ = 1;
  uint64_t completed_ = 0;
  std::string running_name_;
  uint64_t running_seq_ = 0;
  std::chrono::steady_clock::time_point running_since_;
  std::optional<ErrorInfo> sticky_;
  // The stream thread holds an op: from taking it until it finished, cleared before its completion
  // is posted when nothing waits behind it (so a host that saw the completion finds the stream idle).
  bool busy_ = false;
  // An op runs inline on an enqueueing thread; the stream thread leaves the queue alone.
  bool inline_running_ = false;
  uint64_t inlined_ = 0;
  std::shared_ptr<EventState> waiting_on_;
  // Completions of finished ops not posted yet, in seq order (guarded by mu_); held since deferred_since_.
  std::vector<std::unique_ptr<Completion>> deferred_;
  std::chrono::steady_clock::time_point deferred_since_;
  uint64_t batched_posts_ = 0;  // posts that carried more than one completion
  std::atomic<bool> profiling_{false};
  std::vector<ProfileRecord> profile_;
  uint64_t profile_dropped_ = 0;
};

// Steady-clock microseconds: the time base of profile records and of host-side profile spans.
double SteadyNowUs();

// JS class `Stream`: new Stream(deviceOrdinal). Enqueue methods live in ops.cc.
class StreamWrap : public Napi::ObjectWrap<StreamWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit StreamWrap(const Napi::CallbackInfo& info);
  ~StreamWrap() override;

  StreamImpl& impl() { return *impl_; }

 private:
  Napi::Value GetId(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value Pending(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value Profile(const Napi::CallbackInfo& info);
  Napi::Value DrainProfile(const Napi::CallbackInfo& info);
  static Napi::Value NowUs(const Napi::CallbackInfo& info);

  // ops.cc: every base op (a row of BaseOps(), op_table.h) is a JS method running
  // this with its row as the method's data: the one checked enqueue point. A raw N-API
  // callback reading its arguments into a stack array: Napi::CallbackInfo heap-allocates
  // the array of a call with more than 6 arguments (matmul passes 16), once per op.
  static napi_value RunOp(napi_env env, napi_callback_info info);
  // model_ops.cc: modelOp(name, ...args), the checked enqueue point of the model kernels.
  Napi::Value ModelOp(const Napi::CallbackInfo& info);

  std::shared_ptr<StreamImpl> impl_;
};

}  // namespace ascent
