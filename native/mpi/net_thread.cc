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
  int idleUs = 20;
  for (;;) {
    NetOp op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty()) {
        // Idle: sleep (growing to 20 ms, to 1 ms while requests are posted) but wake up
        // now and then to look for abort notices and completed requests.
        cv_.wait_for(lock, std::chrono::microseconds(idleUs));
        if (queue_.empty()) {
          lock.unlock();
          pollAbort();
          pollTracked();
          pollFlows();
          const int cap = tracked_.empty() && flows_.empty() ? 20000 : 1000;
          idleUs = idleUs < cap ? idleUs * 2 : cap;
          continue;
        }
      }
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    idleUs = 20;
    NetResult r;
    try {
      r = op.run();
    } catch (const std::exception& e) {
      r.err = NetErr::kState;
      r.message = std::string("internal error on the net thread: ") + e.what();
    }
    if (!r.deferred) op.done(std::move(r));
  }
}

NetComm* NetThread::comm(int id) {
  std::lock_guard<std::mutex> lock(commMu_);
  if (id < 0 || static_cast<size_t>(id) >= comms_.size()) return nullptr;
  return &comms_[static_cast<size_t>(id)];
}

int NetThread::addComm(NetComm c, const std::string& key) {
  std::lock_guard<std::mutex> lock(commMu_);
  comms_.push_back(std::move(c));
  int id = static_cast<int>(comms_.size()) - 1;
  if (!key.empty()) commKeys_[key] = id;
  return id;
}

int NetThread::lookupComm(const std::string& key) {
  std::lock_guard<std::mutex> lock(commMu_);
  auto it = commKeys_.find(key);
  return it == commKeys_.end() ? -1 : it->second;
}

void NetThread::track(Tracked t) { tracked_.push_back(std::move(t)); }

void NetThread::startFlow(Flow f) {
  for (const auto& a : flows_) {
    if (a.commId == f.commId) {
      waiting_[f.commId].push_back(std::move(f));
      return;
    }
  }
  NetResult r;
  if (advance(f, r)) flows_.push_back(std::move(f));
  else finishFlow(f, std::move(r));
}

bool NetThread::advance(Flow& f, NetResult& r) {
  try {
    r = f.next(f);
  } catch (const std::exception& e) {
    r.err = NetErr::kState;
    r.message = std::string("internal error on the net thread: ") + e.what();
  }
  if (r.err != NetErr::kNone) {
    if (r.err == NetErr::kMpi) markAborted(r.message, {});
    return false;
  }
  return f.req != MPI_REQUEST_NULL;
}

void NetThread::finishFlow(Flow& f, NetResult&& r) {
  const int comm = f.commId;
  f.done(std::move(r));
  // The next flow of this communicator starts now (and may finish at once, e.g. when aborted).
  auto it = waiting_.find(comm);
  while (it != waiting_.end() && !it->second.empty()) {
    Flow g = std::move(it->second.front());
    it->second.pop_front();
    NetResult gr;
    if (advance(g, gr)) {
      flows_.push_back(std::move(g));
      return;
    }
    g.done(std::move(gr));
  }
}

void NetThread::pollFlows() {
  if (flows_.empty()) return;
  const std::string why = abortedBecause();
  std::vector<Flow> active;
  active.swap(flows_);
  std::vector<std::pair<Flow, NetResult>> ended;
  for (auto& f : active) {
    NetResult r;
    int flag = 0;
    int rc = MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag && !why.empty() && f.fingerprint) {
      // Bounded: 100 ms, once per flow (the fingerprint stage ends with this test either way).
      const int64_t until = nowMs() + 100;
      while (rc == MPI_SUCCESS && !flag && nowMs() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        rc = MPI_Test(&f.req, &flag, MPI_STATUS_IGNORE);
      }
    }
    if (rc != MPI_SUCCESS) {
      r.err = NetErr::kMpi;
      r.message = f.what + " failed in MPI: " + mpiErrorString(rc);
      markAborted(r.message, {});
    } else if (flag) {
      if (advance(f, r)) {
        flows_.push_back(std::move(f));
        continue;
      }
    } else if (!why.empty()) {
      // The request is abandoned: a collective cannot be cancelled.
      r.err = NetErr::kAborted;
      r.message = f.what + " was aborted: " + why;
      r.culpritProcesses = abortCulprits();
    } else if (nowMs() >= f.deadlineMs) {
      r.err = NetErr::kTimeout;
      std::ostringstream m;
      m << f.what << " on process " << rank_ << " of " << size_
        << " did not complete within its deadline: at least one other process never joined it (hung, stuck in other work, or gone)";
      r.message = m.str();
      markAborted(r.message, {});
    } else {
      flows_.push_back(std::move(f));
      continue;
    }
    ended.emplace_back(std::move(f), std::move(r));
  }
  for (auto& e : ended) finishFlow(e.first, std::move(e.second));
}

void NetThread::pollTracked() {
  if (tracked_.empty()) return;
  const std::string why = abortedBecause();
  const int64_t now = nowMs();
  std::vector<Tracked> keep;
  std::vector<std::pair<NetDone, NetResult>> settled;
  for (auto& t : tracked_) {
    NetResult r;
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(&t.req, &flag, &st);
    if (rc != MPI_SUCCESS) {
      r.err = rc == MPI_ERR_TRUNCATE ? NetErr::kMismatch : NetErr::kMpi;
      r.message = rc == MPI_ERR_TRUNCATE ? t.what + ": the peer sent more bytes than this receive holds (" + std::to_string(t.expectBytes) + ")"
                                         : t.what + " failed in MPI: " + mpiErrorString(rc);
      if (t.peerWorld >= 0) r.culpritProcesses = {t.peerWorld};
    } else if (flag) {
      int got = 0;
      if (t.expectBytes >= 0 && MPI_Get_count(&st, MPI_BYTE, &got) == MPI_SUCCESS && got != t.expectBytes) {
        r.err = NetErr::kMismatch;
        r.message = t.what + ": the peer sent " + std::to_string(got) + " bytes but this receive expects " + std::to_string(t.expectBytes) +
                    " (send and recv must have the same dtype and numel)";
        if (t.peerWorld >= 0) r.culpritProcesses = {t.peerWorld};
      } else if (t.out && t.data) {
        std::memcpy(t.out, t.data->data(), t.data->size());
      }
    } else if (!why.empty() || now >= t.deadlineMs) {
      // Cancel what MPI lets go of; a send it still holds keeps its staging (leaked on purpose).
      MPI_Cancel(&t.req);
      int done = 0;
      const int64_t until = nowMs() + 100;
      while (!done && nowMs() < until) MPI_Test(&t.req, &done, MPI_STATUS_IGNORE);
      if (!done) t.data = nullptr;
      if (!why.empty()) {
        r.err = NetErr::kAborted;
        r.message = t.what + " was aborted: " + why;
        r.culpritProcesses = abortCulprits();
      } else {
        r.err = NetErr::kTimeout;
        r.message = t.what + " on process " + std::to_string(rank_) + " of " + std::to_string(size_) +
                    " did not complete within its deadline: the peer never posted the matching call (hung, stuck in other work, or gone)";
        if (t.peerWorld >= 0) r.culpritProcesses = {t.peerWorld};
      }
    } else {
      keep.push_back(std::move(t));
      continue;
    }
    delete t.data;
    settled.emplace_back(std::move(t.done), std::move(r));
  }
  tracked_ = std::move(keep);
  for (auto& s : settled) {
    if (s.second.err == NetErr::kTimeout || s.second.err == NetErr::kMismatch || s.second.err == NetErr::kMpi) markAborted(s.second.message, s.second.culpritProcesses);
    s.first(std::move(s.second));
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
  // MULTIPLE when MPI has it: only a split's helper thread needs it (net_split.cc); FUNNELED otherwise.
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) {
    r.err = NetErr::kMpi;
    r.message = "MPI_Init_thread failed: " + mpiErrorString(rc);
    return r;
  }
  // Errors come back as codes (the default handler would kill the whole job without a report).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  threadMultiple_ = provided >= MPI_THREAD_MULTIPLE;
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
  NetComm world;
  world.comm = coll_;
  world.rank = rank_;
  world.size = size_;
  for (int p = 0; p < size_; p++) world.worldOf.push_back(p);
  addComm(std::move(world), "world");
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
    pollTracked();
    pollFlows();
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
