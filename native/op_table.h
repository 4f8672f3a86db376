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
#include <vector>

namespace ascent {

class Reader;
class StreamImpl;
struct Op;

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

// Enqueues one Op named `name` running `run`, keeping every block `r` read alive. With
// `may_inline` (every kernel and copy; not sleep or waitEvent, which would block the
// caller), a small op may run at once on the calling thread when the stream is idle.
uint64_t EnqueueOp(StreamImpl& s, const Reader& r, const std::string& name, uint64_t token, std::function<void(Op&)> run,
                   bool may_inline = true);

}  // namespace ascent
