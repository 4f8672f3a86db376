// The "net" thread of one process: the thread that calls MPI (so
// MPI_THREAD_FUNNELED is enough; the one exception is a split's MPI_Comm_split,
// which runs on a helper thread when MPI provides MPI_THREAD_MULTIPLE, see
// net_split.cc). Rank
// threads queue ops here; each op runs nonblocking MPI calls and waits for them
// with MPI_Test and a backoff that ends in short sleeps (never a busy spin), under
// the op's deadline. A control channel (its own duplicate of MPI_COMM_WORLD)
// carries abort notices: a process whose ranks failed tells every other one, so
// their ranks fail fast with the cause instead of waiting for a timeout.
//
// No op blocks the thread on its peers: a collective is a flow (the fingerprint
// exchange, then the data op, each a nonblocking request) and a point-to-point
// transfer a tracked request; the thread tests them all in turn. Ranks of one
// process may use several communicators among processes at once (a split per
// color), in whatever order their threads reach them: one collective waiting on
// communicator A must not hold up the one on B that the other process needs
// first. Flows of one communicator run one after another, in submission order,
// so every process posts that communicator's collectives in the same order.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ascent_mpi {

// Codes map to Ascent's error classes on the TS side (src/runtime/comm/net.ts).
enum class NetErr { kNone, kTimeout, kMismatch, kAborted, kMpi, kState };

struct NetResult {
  NetErr err = NetErr::kNone;
  std::string message;
  std::vector<int> culpritProcesses;  // MPI ranks of the processes most likely at fault
  std::string json;                   // init's answer
  bool deferred = false;              // the op tracks a request: its result comes later
};

using NetDone = std::function<void(NetResult&&)>;

// A communicator among processes: id 0 is the world (MPI_COMM_WORLD's duplicate),
// others come from split. Fingerprints count per communicator.
struct NetComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = -1, size = 0;
  uint64_t seq = 0;
  std::vector<int> worldOf;  // world process of each rank (culprits are reported as world processes)
};

// A collective among processes as a sequence of nonblocking requests. `next` runs
// first and again whenever `req` completed: it posts the next request into `req`
// and returns no error, or leaves `req` null to finish (its result is the op's),
// or returns an error.
struct Flow {
  int commId = 0;
  int64_t deadlineMs = 0;
  std::string what;  // the current request, for timeout and failure reports
  MPI_Request req = MPI_REQUEST_NULL;
  // `req` is the fingerprint exchange: on an abort it gets a brief grace to complete, so a mismatch
  // that a peer saw first (and aborted for) is reported here as the mismatch too.
  bool fingerprint = false;
  std::function<NetResult(Flow&)> next;
  NetDone done;
};

// A posted request the net thread completes later (point-to-point).
struct Tracked {
  MPI_Request req = MPI_REQUEST_NULL;
  int64_t deadlineMs = 0;
  std::string what;
  NetDone done;
  std::vector<char>* data = nullptr;  // owned staging: freed when the request is done, leaked if MPI still holds it
  void* out = nullptr;                // a receive copies data here on success
  int64_t expectBytes = -1;           // a receive checks the byte count it got
  int peerWorld = -1;                 // the peer's world process (blamed on a timeout)
};

struct NetOp {
  std::function<NetResult()> run;            // runs on the net thread
  std::function<void(NetResult&&)> done;     // hands the result back (from the net thread)
};

struct AbortNotice {
  int process = -1;
  std::string reason;
};

class NetThread {
 public:
  static NetThread& get();

  void submit(NetOp op);
  // Called on the net thread by ops.
  NetResult init();
  NetResult finalize();
  // Waits for `req` until `deadlineMs` (steady clock); watches for abort notices meanwhile.
  NetResult wait(MPI_Request* req, int64_t deadlineMs, const std::string& what);
  // Sends an abort notice to every other process (best effort, bounded by timeoutMs).
  NetResult notifyAbort(const std::string& reason, int64_t timeoutMs);

  bool initialized() const { return initialized_; }
  // MPI provided MPI_THREAD_MULTIPLE: a split's blocking calls may run on a helper thread (net_split.cc).
  bool threadMultiple() const { return threadMultiple_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm coll() const { return coll_; }

  // Communicators among processes (0 = the world). Null for an unknown id.
  NetComm* comm(int id);
  int addComm(NetComm c, const std::string& key);
  // The id registered under `key` by a split, or -1 (any thread).
  int lookupComm(const std::string& key);
  // Hands a posted request to the thread; `done` runs when it completes, fails or times out.
  void track(Tracked t);
  // Starts a flow now, or after the flows of its communicator submitted before it.
  void startFlow(Flow f);
  // Marks the net leg failed by a local error (later ops fail at once; peers learn it from the launcher).
  void markFailed(const std::string& why) { markAborted(why, {}); }

  // The abort callback (set from JS); called on the net thread when a notice arrives.
  void onAbort(std::function<void(const AbortNotice&)> cb);
  // Set once aborted: every later op fails at once with this message.
  std::string abortedBecause() const;
  std::vector<int> abortCulprits() const;

 private:
  NetThread() = default;
  void loop();
  void pollAbort();
  void pollTracked();
  void pollFlows();
  // Runs `f.next` once; true when the flow goes on (a request is posted).
  bool advance(Flow& f, NetResult& r);
  void finishFlow(Flow& f, NetResult&& r);
  void markAborted(const std::string& why, std::vector<int> culprits, bool fromPeer = false);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<NetOp> queue_;
  std::thread thread_;
  bool started_ = false;

  // Net-thread state.
  bool initialized_ = false;
  bool threadMultiple_ = false;
  bool finalized_ = false;
  int rank_ = -1, size_ = 0;
  MPI_Comm coll_ = MPI_COMM_NULL, ctrl_ = MPI_COMM_NULL;
  std::vector<Tracked> tracked_;
  std::vector<Flow> flows_;                   // active: at most one per communicator
  std::map<int, std::deque<Flow>> waiting_;  // by communicator, behind its active flow

  std::mutex commMu_;
  std::deque<NetComm> comms_;  // a deque: entries never move, so a pointer stays valid
  std::map<std::string, int> commKeys_;
  MPI_Request abortReq_ = MPI_REQUEST_NULL;
  std::vector<char> abortBuf_;

  mutable std::mutex abortMu_;
  std::string abortedBecause_;
  std::vector<int> abortCulprits_;
  std::function<void(const AbortNotice&)> onAbort_;
};

int64_t nowMs();
std::string mpiErrorString(int code);

}  // namespace ascent_mpi
