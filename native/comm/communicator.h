// The per-rank Communicator (JS class, one per rank per communicator) and the one
// checked enqueue point every collective and P2P call goes through (Submit):
// validate synchronously (usable, stream and buffers on the communicator's device,
// sizes in bounds; InvalidArgument / CommAborted before any side effect), assign the
// seq, record "enqueued" in the flight recorder, enqueue ONE op on the stream.
//
// Collectives complete through the op's completion token. A failing op posts its
// own completion with the original error (CollectiveMismatch, CollectiveTimeout,
// CommAborted, P2PDeadlock) and clears the token, so the awaiting promise sees that
// error rather than the stream's wrapping StreamError; the stream still turns
// sticky, so later work on it is skipped.
#pragma once

#include <napi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/p2p.h"
#include "device/buffer.h"

namespace ascent {

class EnvData;
class StreamImpl;

namespace comm {

struct CommImpl {
  // Set once: at creation (initRank) or by the split thread before `ready`
  // (guarded by mu until ready; read freely on the JS thread after the completion).
  std::mutex mu;
  std::shared_ptr<CommGroup> group;
  int rank = -1;
  int size = 0;
  int device = -1;
  double exec_timeout_ms = 0;
  double connect_timeout_ms = 0;
  std::string trace_dir;
  std::atomic<bool> ready{false};

  // JS thread only.
  bool destroyed = false;
  uint64_t next_seq = 1;
  std::vector<uint64_t> sends_to, recvs_from;  // per peer: P2P ops enqueued so far
  int group_depth = 0;
  std::vector<P2PItem> group_items;
  std::vector<std::shared_ptr<Block>> group_keep;
  StreamImpl* group_stream = nullptr;
  Napi::ObjectReference group_stream_ref;  // keeps the JS Stream alive until groupEnd
};

class CommWrap : public Napi::ObjectWrap<CommWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  static Napi::Object NewInstance(Napi::Env env, std::shared_ptr<CommImpl> impl);
  explicit CommWrap(const Napi::CallbackInfo& info);

 private:
  Napi::Value GetRank(const Napi::CallbackInfo& info);
  Napi::Value GetSize(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetId(const Napi::CallbackInfo& info);
  Napi::Value GetAborted(const Napi::CallbackInfo& info);
  Napi::Value GetDestroyed(const Napi::CallbackInfo& info);
  Napi::Value AbortCause(const Napi::CallbackInfo& info);

  Napi::Value AllReduce(const Napi::CallbackInfo& info);
  Napi::Value Broadcast(const Napi::CallbackInfo& info);
  Napi::Value AllGather(const Napi::CallbackInfo& info);
  Napi::Value ReduceScatter(const Napi::CallbackInfo& info);
  Napi::Value AllToAll(const Napi::CallbackInfo& info);
  Napi::Value AllToAllV(const Napi::CallbackInfo& info);
  Napi::Value Barrier(const Napi::CallbackInfo& info);
  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Recv(const Napi::CallbackInfo& info);
  Napi::Value GroupStart(const Napi::CallbackInfo& info);
  Napi::Value GroupEnd(const Napi::CallbackInfo& info);
  Napi::Value Split(const Napi::CallbackInfo& info);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value FlightRecord(const Napi::CallbackInfo& info);

  // Throws unless the communicator is ready, not destroyed and not aborted.
  void CheckUsable(const char* what);
  StreamImpl& ArgStream(const Napi::CallbackInfo& info, size_t i, Napi::Object* js = nullptr);
  uint64_t EnqueueCollective(Napi::Env env, StreamImpl& stream, Desc d, uint64_t token,
                             std::vector<std::shared_ptr<Block>> keep);
  uint64_t Submit(Napi::Env env, StreamImpl& stream, const std::string& name, uint64_t seq, const std::string& fp,
                  uint64_t token, std::vector<std::shared_ptr<Block>> keep,
                  std::function<void(Clock::time_point)> body);
  Napi::Value P2P(const Napi::CallbackInfo& info, bool is_send);

  std::shared_ptr<CommImpl> impl_;
};

}  // namespace comm

// Adds Communicator, commUniqueId, commInitRank and commAbortById to the exports.
// Call after EnvData::Install (the env cleanup hook registered here must run
// before the device layer's stream teardown; hooks run in reverse order).
void InitComm(Napi::Env env, Napi::Object exports);

}  // namespace ascent
