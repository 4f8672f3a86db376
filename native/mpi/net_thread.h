// The "net" thread of one process: the only thread that calls MPI (so
// MPI_THREAD_FUNNELED is enough whatever the MPI library provides). Rank
// threads queue ops here; each op runs nonblocking MPI calls and waits for them
// with MPI_Test and a backoff that ends in short sleeps (never a busy spin), under
// the op's deadline. A control channel (its own duplicate of MPI_COMM_WORLD)
// carries abort notices: a process whose ranks failed tells every other one, so
// their ranks fail fast with the cause instead of waiting for a timeout.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm coll() const { return coll_; }
  uint64_t nextSeq() { return ++seq_; }

  // The abort callback (set from JS); called on the net thread when a notice arrives.
  void onAbort(std::function<void(const AbortNotice&)> cb);
  // Set once aborted: every later op fails at once with this message.
  std::string abortedBecause() const;
  std::vector<int> abortCulprits() const;

 private:
  NetThread() = default;
  void loop();
  void pollAbort();
  void markAborted(const std::string& why, std::vector<int> culprits, bool fromPeer = false);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<NetOp> queue_;
  std::thread thread_;
  bool started_ = false;

  // Net-thread state.
  bool initialized_ = false;
  bool finalized_ = false;
  int rank_ = -1, size_ = 0;
  uint64_t seq_ = 0;
  MPI_Comm coll_ = MPI_COMM_NULL, ctrl_ = MPI_COMM_NULL;
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
