// The op tables of a Stream. Every enqueue entry point is one row: a name and a
// handler that reads its arguments with a Reader bound to the stream's device
// (args.h), checks them synchronously (InvalidArgument, nothing enqueued) and
// enqueues one Op keeping the Reader's blocks alive, returning the op's seq.
// Base ops (ops.cc, fingerprint_op.cc) are one JS method each; model kernels
// (model_ops.cc) share one method, stream.modelOp(name, ...args).
//
// The tables are constants built once and never changed, so they are shared by
// every env (they hold no per-env state; that lives in EnvData, env_data.h).
#pragma once

#include <napi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "args.h"
#include "device/stream.h"

namespace ascent {

struct OpRow {
  const char* name;
  uint64_t (*run)(StreamImpl& s, Reader& r);
};

const std::vector<OpRow>& BaseOps();   // ops.cc
const std::vector<OpRow>& ModelOps();  // model_ops.cc
uint64_t FingerprintOp(StreamImpl& s, Reader& r);  // fingerprint_op.cc
uint64_t CopyRangesOp(StreamImpl& s, Reader& r);   // copy_ranges_op.cc

// Buffers read by `r` from here on must be on `s`'s device.
void BindToStream(Reader& r, const StreamImpl& s);

// Ops whose buffers add up to at most this many bytes may run inline on the enqueueing
// thread when their stream is idle (device/stream.h): a 64..256 matmul or a small
// elementwise op, where waking the stream thread cost more than the kernel. Larger ones
// stay on the stream thread so the host keeps enqueueing while they run.
constexpr uint64_t kInlineMaxBytes = 1 << 20;

// EnqueueOp's queued half: the Op on the heap, `run` in a std::function, `r`'s blocks in its keep list.
uint64_t EnqueueQueuedOp(StreamImpl& s, const Reader& r, const std::string& name, uint64_t token, std::function<void(Op&)> run,
                         bool may_inline);

// Enqueues one Op named `name` running `run` (a callable taking Op&), keeping every block `r`
// read alive. With `may_inline` (every kernel and copy; not sleep or waitEvent, which would
// block the caller), a small op may run at once on the calling thread when the stream is idle.
// That inline op is an Op on this stack calling `run` where it is: no heap Op, no std::function
// (its closure, a matmul's arguments, is larger than std::function keeps in place) and no keep
// list (`r`'s spans hold the blocks until the op has finished), so it allocates nothing.
template <typename F>
uint64_t EnqueueOp(StreamImpl& s, const Reader& r, const std::string& name, uint64_t token, F&& run, bool may_inline = true) {
  if (may_inline && r.SpanBytes() <= kInlineMaxBytes) {
    Op op;
    op.name = name;
    op.token = token;
    op.may_inline = true;
    op.run_ref = [](void* ctx, Op& o) { (*static_cast<std::remove_reference_t<F>*>(ctx))(o); };
    op.run_ctx = const_cast<void*>(static_cast<const void*>(std::addressof(run)));
    uint64_t seq;
    if (s.TryRunInline(op, &seq)) return seq;
  }
  return EnqueueQueuedOp(s, r, name, token, std::function<void(Op&)>(std::forward<F>(run)), may_inline);
}

}  // namespace ascent
