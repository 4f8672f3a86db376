// Point-to-point between processes (see net_ops.h). A send or receive is posted and
// tracked by the net thread, never waited for inline: a receive whose sender comes
// later must not hold up the collectives and other transfers queued behind it.
// Both sides stage their data in memory the net thread owns, so a request MPI
// cannot cancel at a deadline never reads or writes a buffer JS has freed.
#include <climits>
#include <cstring>

#include "net_common.h"
#include "net_ops.h"

namespace ascent_mpi {

namespace {

NetResult post(bool isSend, void* buf, int64_t nbytes, int peer, int tag, int64_t timeoutMs, int commId, NetDone done) {
  const char* what = isSend ? "net send" : "net recv";
  NetResult r;
  NetComm* c = ready(what, commId, r);
  if (!c) return r;
  if (nbytes > INT_MAX) return bad(std::string(what) + ": size exceeds MPI's int range");
  if (peer < 0 || peer >= c->size || peer == c->rank) return bad(std::string(what) + ": peer process out of range");
  if (tag < 0 || tag > 32767) return bad(std::string(what) + ": tag out of MPI's guaranteed range [0, 32767]");
  Tracked t;
  t.data = new std::vector<char>(static_cast<size_t>(nbytes));
  if (isSend && nbytes > 0) std::memcpy(t.data->data(), buf, static_cast<size_t>(nbytes));
  t.peerWorld = c->worldOf[peer];
  t.what = std::string(what) + " (tag " + std::to_string(tag) + (isSend ? ", to process " : ", from process ") + std::to_string(t.peerWorld) + ")";
  t.deadlineMs = nowMs() + timeoutMs;
  int rc = isSend ? MPI_Isend(t.data->data(), static_cast<int>(nbytes), MPI_BYTE, peer, tag, c->comm, &t.req)
                  : MPI_Irecv(t.data->data(), static_cast<int>(nbytes), MPI_BYTE, peer, tag, c->comm, &t.req);
  if (rc != MPI_SUCCESS) {
    delete t.data;
    r.err = NetErr::kMpi;
    r.message = t.what + " failed to start in MPI: " + mpiErrorString(rc);
    return r;
  }
  if (!isSend) {
    t.out = buf;
    t.expectBytes = nbytes;
  }
  t.done = std::move(done);
  NetThread::get().track(std::move(t));
  r.deferred = true;
  return r;
}

}  // namespace

NetResult netSend(const void* buf, int64_t nbytes, int peer, int tag, int64_t timeoutMs, int commId, NetDone done) {
  return post(true, const_cast<void*>(buf), nbytes, peer, tag, timeoutMs, commId, std::move(done));
}

NetResult netRecv(void* buf, int64_t nbytes, int peer, int tag, int64_t timeoutMs, int commId, NetDone done) {
  return post(false, buf, nbytes, peer, tag, timeoutMs, commId, std::move(done));
}

}  // namespace ascent_mpi
