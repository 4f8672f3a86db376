// The per-rank Communicator (JS class, one per rank per communicator) and the one
// checked submission path every collective, P2P call and split goes through
// (Dispatch, then Submit): validate synchronously (usable, stream and buffers on the
// communicator's device, sizes in bounds; InvalidArgument / CommAborted before any
// side effect), assign the seq, record "enqueued" in the flight recorder, then run
// ONE unit of work: an op on the stream, or for split a rendezvous thread.
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
class Reader;
class StreamImpl;

namespace comm {

// The communicators of an env that went away (their JS object was collected) without
// destroy(), while their group was still live: an env's teardown aborts those groups too,
// exactly as it aborts its live communicators'. The wrapper of a worker that exits can be
// collected before the env's cleanup hook runs; without this its peers waited in the
// collective until the exec timeout. Shared by the env and its communicators, so a
// communicator freed on a stream thread, or after the env, still has it.
struct Departures {
  struct Entry {
    std::weak_ptr<CommGroup> group;
    int rank;
    int device;
  };
  std::mutex mu;
  std::vector<Entry> entries;
  void Add(const std::shared_ptr<CommGroup>& group, int rank, int device);
  std::vector<Entry> Take();
};

struct CommImpl {
  ~CommImpl();
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

  // Set by CommEnv::AddComm: where this communicator is recorded when it goes away.
  std::shared_ptr<Departures> departures;

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
  // One row per JS method (Methods(), communicator.cc): its name, its handler and
  // whether the communicator must be usable (CheckUsable) before anything is read.
  struct Row {
    const char* name;
    Napi::Value (CommWrap::*run)(Reader& r);
    bool usable;
  };
  static const std::vector<Row>& Methods();
  // Every method runs this with its row as the method's data: one Reader whose
  // buffers must be on the communicator's device, then the row's handler.
  Napi::Value Dispatch(const Napi::CallbackInfo& info);

  Napi::Value GetRank(const Napi::CallbackInfo& info);
  Napi::Value GetSize(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetId(const Napi::CallbackInfo& info);
  Napi::Value GetAborted(const Napi::CallbackInfo& info);
  Napi::Value GetDestroyed(const Napi::CallbackInfo& info);

  Napi::Value AbortCause(Reader& r);
  Napi::Value AllReduce(Reader& r);
  Napi::Value Broadcast(Reader& r);
  Napi::Value AllGather(Reader& r);
  Napi::Value ReduceScatter(Reader& r);
  Napi::Value AllToAll(Reader& r);
  Napi::Value AllToAllV(Reader& r);
  Napi::Value Barrier(Reader& r);
  Napi::Value Send(Reader& r);
  Napi::Value Recv(Reader& r);
  Napi::Value GroupStart(Reader& r);
  Napi::Value GroupEnd(Reader& r);
  Napi::Value Split(Reader& r);
  Napi::Value Abort(Reader& r);
  Napi::Value Destroy(Reader& r);
  Napi::Value FlightRecord(Reader& r);

  // Throws unless the communicator is ready, not destroyed and not aborted.
  void CheckUsable(const char* what);
  // A Stream on the communicator's device that is not destroyed.
  StreamImpl& ReadStream(Reader& r, Napi::Object* js = nullptr);
  // One unit of communicator work: what the flight recorder shows and what runs.
  struct Work {
    std::string name;  // "allReduce", "send", "groupEnd", "split"
    uint64_t seq = 0;  // collective sequence number (Stamp); 0 for P2P
    std::string fingerprint;
    uint64_t token = 0;
    std::vector<std::shared_ptr<Block>> keep;
    double timeout_ms = 0;  // the body's deadline, counted from its start
    std::function<void(Clock::time_point deadline)> body;
    // Collectives: the stream may hold back earlier completions while this runs (device/stream.h,
    // "Batched completions"); their waits and large data moves flush them first.
    bool batchable = false;
  };
  // Assigns the collective's seq and fingerprint (JS thread, call order: every rank
  // stamps its collectives in the same order, so equal seqs meet).
  void Stamp(Desc& d);
  // Stamps `d` and submits RunCollective of it on `stream` under the exec timeout.
  uint64_t EnqueueCollective(Napi::Env env, StreamImpl& stream, Desc d, uint64_t token,
                             std::vector<std::shared_ptr<Block>> keep);
  // The one checked submission path of collectives, P2P and split (see communicator.cc).
  uint64_t Submit(Napi::Env env, StreamImpl* stream, Work w);
  Napi::Value P2P(Reader& r, bool is_send);

  std::shared_ptr<CommImpl> impl_;
};

}  // namespace comm

// Adds Communicator, commUniqueId, commInitRank and commAbortById to the exports and
// this env's communicator state to its EnvData. Call after EnvData::Install.
void InitComm(Napi::Env env, Napi::Object exports);

}  // namespace ascent
