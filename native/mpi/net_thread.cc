// The net thread: queue, MPI init / finalize, bounded waits and abort notices (see net_thread.h).
#include "net_thread.h"

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <sstream>

namespace ascent_mpi {

namespace {
constexpr int kAbortTag = 7;
constexpr int kAbortBytes = 4096;
}  // namespace

int64_t nowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::string mpiErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

NetThread& NetThread::get() {
  // Process-wide, never destroyed: the thread outlives every JS env that loaded the addon.
  static NetThread* t = new NetThread();
  return *t;
}

void NetThread::submit(NetOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(op));
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { loop(); });
    thread_.detach();
  }
  cv_.notify_one();
}

void NetThread::loop() {
  int idleMs = 1;
  for (;;) {
    NetOp op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        // Idle: sleep (growing to 20 ms) but wake up now and then to look for abort notices.
        cv_.wait_for(lock, std::chrono::milliseconds(idleMs));
        if (queue_.empty()) {
          lock.unlock();
          pollAbort();
          idleMs = idleMs < 20 ? idleMs * 2 : 20;
          continue;
        }
      }
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    idleMs = 1;
    NetResult r;
    try {
      r = op.run();
    } catch (const std::exception& e) {
      r.err = NetErr::kState;
      r.message = std::string("internal error on the net thread: ") + e.what();
    }
    op.done(std::move(r));
  }
}

NetResult NetThread::init() {
  NetResult r;
  if (initialized_) {
    r.err = NetErr::kState;
    r.message = "MPI is already initialized in this process.";
    return r;
  }
  // Open MPI loads its transports as plugins that expect libmpi's symbols to be
  // global; an addon is dlopen'ed RTLD_LOCAL, so promote libmpi first.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&MPI_Init), &info) && info.dli_fname) dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    r.err = NetErr::kMpi;
    r.message = "MPI_Init_thread failed: " + mpiErrorString(rc);
    return r;
  }
  // Errors come back as codes (the default handler would kill the whole job without a report).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  initialized_ = true;
  const int64_t deadline = nowMs() + 120000;
  MPI_Request reqs[2];
  MPI_Comm_idup(MPI_COMM_WORLD, &coll_, &reqs[0]);
  NetResult w = wait(&reqs[0], deadline, "the collective channel's MPI_Comm_idup");
  if (w.err != NetErr::kNone) return w;
  MPI_Comm_idup(MPI_COMM_WORLD, &ctrl_, &reqs[1]);
  w = wait(&reqs[1], deadline, "the control channel's MPI_Comm_idup");
  if (w.err != NetErr::kNone) return w;
  MPI_Comm_set_errhandler(coll_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(ctrl_, MPI_ERRORS_RETURN);
  abortBuf_.assign(kAbortBytes, 0);
  MPI_Irecv(abortBuf_.data(), kAbortBytes, MPI_CHAR, MPI_ANY_SOURCE, kAbortTag, ctrl_, &abortReq_);

  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  std::string v(version, vlen);
  std::string line = v.substr(0, v.find_first_of("\n,"));
  std::ostringstream js;
  js << "{\"rank\":" << rank_ << ",\"size\":" << size_ << ",\"threadLevel\":"
     << (provided >= MPI_THREAD_MULTIPLE ? "\"multiple\"" : provided >= MPI_THREAD_SERIALIZED ? "\"serialized\"" : provided >= MPI_THREAD_FUNNELED ? "\"funneled\"" : "\"single\"")
     << ",\"library\":\"";
  for (char c : line) js << (c == '"' || c == '\\' ? ' ' : c);
  js << "\"}";
  r.json = js.str();
  return r;
}

NetResult NetThread::finalize() {
  NetResult r;
  if (!initialized_ || finalized_) return r;
  finalized_ = true;
  if (abortReq_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&abortReq_);
    int flag = 0;
    const int64_t deadline = nowMs() + 2000;
    while (!flag && nowMs() < deadline) {
      MPI_Test(&abortReq_, &flag, MPI_STATUS_IGNORE);
      if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) {
    r.err = NetErr::kMpi;
    r.message = "MPI_Finalize failed: " + mpiErrorString(rc);
  }
  return r;
}

NetResult NetThread::wait(MPI_Request* req, int64_t deadlineMs, const std::string& what) {
  NetResult r;
  int spins = 0;
  int sleepUs = 20;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(req, &flag, &st);
    if (rc != MPI_SUCCESS) {
      r.err = NetErr::kMpi;
      r.message = what + " failed in MPI: " + mpiErrorString(rc);
      markAborted(r.message, {});
      return r;
    }
    if (flag) return r;
    pollAbort();
    std::string why = abortedBecause();
    if (!why.empty()) {
      r.err = NetErr::kAborted;
      r.message = what + " was aborted: " + why;
      r.culpritProcesses = abortCulprits();
      return r;  // the request is abandoned: a collective cannot be cancelled
    }
    if (nowMs() >= deadlineMs) {
      r.err = NetErr::kTimeout;
      std::ostringstream m;
      m << what << " on process " << rank_ << " of " << size_
        << " did not complete within its deadline: at least one other process never joined it (hung, stuck in other work, or gone)";
      r.message = m.str();
      markAborted(r.message, {});
      return r;
    }
    // Back off: a few yields for latency, then sleeps growing to 1 ms.
    if (spins < 64) {
      spins++;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
      sleepUs = sleepUs < 1000 ? sleepUs * 2 : 1000;
    }
  }
}

void NetThread::pollAbort() {
  if (!initialized_ || finalized_ || abortReq_ == MPI_REQUEST_NULL) return;
  int flag = 0;
  MPI_Status st;
  if (MPI_Test(&abortReq_, &flag, &st) != MPI_SUCCESS || !flag) return;
  abortReq_ = MPI_REQUEST_NULL;
  int from = st.MPI_SOURCE;
  std::string reason(abortBuf_.data(), strnlen(abortBuf_.data(), kAbortBytes));
  markAborted("process " + std::to_string(from) + " aborted the job: " + reason, {from}, true);
}

void NetThread::markAborted(const std::string& why, std::vector<int> culprits, bool fromPeer) {
  std::function<void(const AbortNotice&)> cb;
  {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (!abortedBecause_.empty()) return;
    abortedBecause_ = why;
    abortCulprits_ = culprits;
    // Only a peer's notice is news for the launcher; a local failure reaches it through the rank's error.
    if (fromPeer) cb = onAbort_;
  }
  if (cb) cb(AbortNotice{culprits.empty() ? -1 : culprits[0], why});
}

NetResult NetThread::notifyAbort(const std::string& reason, int64_t timeoutMs) {
  NetResult r;
  if (!initialized_ || finalized_) return r;
  {
    std::lock_guard<std::mutex> lock(abortMu_);
    if (abortedBecause_.empty()) abortedBecause_ = "this process aborted the job: " + reason;
  }
  // Never freed: a send still pending at the deadline keeps reading it.
  const std::string& msg = *new std::string(reason.substr(0, kAbortBytes - 1));
  std::vector<MPI_Request> reqs;
  for (int p = 0; p < size_; p++) {
    if (p == rank_) continue;
    MPI_Request q;
    if (MPI_Isend(msg.c_str(), static_cast<int>(msg.size()) + 1, MPI_CHAR, p, kAbortTag, ctrl_, &q) == MPI_SUCCESS) reqs.push_back(q);
  }
  const int64_t deadline = nowMs() + timeoutMs;
  for (auto& q : reqs) {
    int flag = 0;
    while (!flag && nowMs() < deadline) {
      MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
      if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return r;
}

void NetThread::onAbort(std::function<void(const AbortNotice&)> cb) {
  std::lock_guard<std::mutex> lock(abortMu_);
  onAbort_ = std::move(cb);
}

std::string NetThread::abortedBecause() const {
  std::lock_guard<std::mutex> lock(abortMu_);
  return abortedBecause_;
}

std::vector<int> NetThread::abortCulprits() const {
  std::lock_guard<std::mutex> lock(abortMu_);
  return abortCulprits_;
}

}  // namespace ascent_mpi
