// Split among processes (see net_ops.h). MPI has no nonblocking MPI_Comm_split, and a
// blocking one on the net thread could deadlock: two splits of different communicators
// among the same processes (e.g. two ranks of a process each splitting a communicator
// it leads) may pass their fingerprint exchanges in either order, so process A would
// block in split X while process B blocks in split Y, each waiting for the other.
// So when MPI provides MPI_THREAD_MULTIPLE the MPI_Comm_split calls run on a helper
// thread of their own, behind a generalized request the net thread tests like any
// other (it goes on serving every other communicator meanwhile, and the flow's deadline
// bounds the wait). Without MPI_THREAD_MULTIPLE they run on the net thread, as blocking
// calls; then one split at a time per process is safe (the TS side issues splits in the
// same order on every process), concurrent splits of different communicators are not.
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "net_common.h"
#include "net_ops.h"

namespace ascent_mpi {

namespace {

// What the helper thread hands back: the JSON {color: id} or an error.
struct SplitOutcome {
  std::mutex mu;
  NetResult result;
};

int queryFn(void*, MPI_Status* st) {
  MPI_Status_set_elements(st, MPI_BYTE, 0);
  MPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
int freeFn(void*) { return MPI_SUCCESS; }
int cancelFn(void*, int) { return MPI_SUCCESS; }

// The splits themselves (blocking MPI calls), on whichever thread runs them.
NetResult splitNow(const NetComm& parent, const std::vector<int>& colors, const std::vector<uint8_t>& member, const std::string& keyPrefix) {
  NetResult r;
  NetThread& t = NetThread::get();
  std::ostringstream ids;
  ids << "{";
  for (size_t i = 0; i < colors.size(); i++) {
    MPI_Comm sub = MPI_COMM_NULL;
    int rc = MPI_Comm_split(parent.comm, member[i] ? 0 : MPI_UNDEFINED, parent.rank, &sub);
    if (rc != MPI_SUCCESS) {
      r.err = NetErr::kMpi;
      r.message = "net split: MPI_Comm_split for color " + std::to_string(colors[i]) + " failed: " + mpiErrorString(rc);
      return r;
    }
    if (sub == MPI_COMM_NULL) continue;
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    NetComm c;
    c.comm = sub;
    MPI_Comm_rank(sub, &c.rank);
    MPI_Comm_size(sub, &c.size);
    // Ranks of the new communicator as world processes, for reports.
    MPI_Group pg, sg;
    MPI_Comm_group(parent.comm, &pg);
    MPI_Comm_group(sub, &sg);
    std::vector<int> in(static_cast<size_t>(c.size)), inParent(static_cast<size_t>(c.size));
    for (int k = 0; k < c.size; k++) in[static_cast<size_t>(k)] = k;
    MPI_Group_translate_ranks(sg, c.size, in.data(), pg, inParent.data());
    MPI_Group_free(&pg);
    MPI_Group_free(&sg);
    for (int k = 0; k < c.size; k++) c.worldOf.push_back(parent.worldOf[static_cast<size_t>(inParent[static_cast<size_t>(k)])]);
    // addComm is safe from any thread; the id is found by lookupComm once the flow finished.
    int id = t.addComm(std::move(c), keyPrefix + ":" + std::to_string(colors[i]));
    ids << (ids.tellp() > 1 ? "," : "") << "\"" << colors[i] << "\":" << id;
  }
  ids << "}";
  r.json = ids.str();
  return r;
}

}  // namespace

NetResult netSplit(int parentId, const std::vector<int>& colors, const std::vector<uint8_t>& member, const std::string& keyPrefix, int64_t timeoutMs,
                   NetDone done) {
  if (member.size() != colors.size()) return bad("net split: one member flag per color is needed");
  int64_t digest = 0;
  for (int c : colors) digest = digest * 1000003 + c;
  auto outcome = std::make_shared<SplitOutcome>();
  auto post = [=](NetComm& parent, MPI_Request* req) -> NetResult {
    NetThread& t = NetThread::get();
    if (!t.threadMultiple()) {
      NetResult r = splitNow(parent, colors, member, keyPrefix);
      if (r.err == NetErr::kMpi) t.markFailed(r.message);
      return r;
    }
    int rc = MPI_Grequest_start(queryFn, freeFn, cancelFn, nullptr, req);
    if (rc != MPI_SUCCESS) return started(rc, "net split: MPI_Grequest_start");
    // The parent outlives the split: communicators among processes are never freed before finalize.
    const NetComm* p = &parent;
    MPI_Request handle = *req;
    std::thread([=] {
      NetResult r = splitNow(*p, colors, member, keyPrefix);
      {
        std::lock_guard<std::mutex> lock(outcome->mu);
        outcome->result = std::move(r);
      }
      MPI_Grequest_complete(handle);
    }).detach();
    return NetResult{};
  };
  auto finish = [=]() -> NetResult {
    std::lock_guard<std::mutex> lock(outcome->mu);
    NetResult r = std::move(outcome->result);
    if (r.err == NetErr::kMpi) NetThread::get().markFailed(r.message);
    return r;
  };
  return startCollective(parentId, "net split", kSplit, -1, static_cast<int64_t>(colors.size()), digest, timeoutMs, post, "net split (MPI_Comm_split)",
                         std::move(done), finish);
}

}  // namespace ascent_mpi
