// Collectives among processes (see net_ops.h).
#include "net_ops.h"

#include "net_common.h"

#include <climits>
#include <memory>
#include <sstream>

namespace ascent_mpi {

const char* kindName(int64_t k) {
  switch (k) {
    case kAllReduce: return "allReduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "allGather";
    case kBarrier: return "barrier";
    case kAllToAll: return "allToAll";
    case kReduceScatter: return "reduceScatter";
    case kSplit: return "split";
    case kAllToAllVCounts: return "allToAllV";
    default: return "?";
  }
}

namespace {
constexpr int kFp = 5;  // seq, kind, dtype, count, redop/root

std::string describe(const int64_t* f) {
  std::ostringstream s;
  s << kindName(f[1]) << "(seq " << f[0] << ", dtype " << f[2] << ", count " << f[3] << ", " << (f[1] == kBroadcast ? "root " : "op ") << f[4] << ")";
  return s.str();
}
}  // namespace

NetComm* ready(const char* what, int id, NetResult& r) {
  NetThread& t = NetThread::get();
  if (!t.initialized()) {
    r.err = NetErr::kState;
    r.message = std::string(what) + " needs MPI: call init() first (ascent launch under mpirun does).";
    return nullptr;
  }
  std::string why = t.abortedBecause();
  if (!why.empty()) {
    r.err = NetErr::kAborted;
    r.message = std::string(what) + " refused: the job's network communicator is aborted: " + why;
    r.culpritProcesses = t.abortCulprits();
    return nullptr;
  }
  NetComm* c = t.comm(id);
  if (!c) {
    r.err = NetErr::kState;
    r.message = std::string(what) + ": no communicator among processes has id " + std::to_string(id) + " in this process";
  }
  return c;
}

static NetResult compareFingerprints(const NetComm& c, const std::vector<int64_t>& all) {
  NetResult r;
  std::vector<int> differ;
  for (int p = 0; p < c.size; p++) {
    for (int i = 0; i < kFp; i++) {
      if (all[p * kFp + i] != all[i]) {
        differ.push_back(p);
        break;
      }
    }
  }
  if (differ.empty()) return r;
  // Reports name world processes (a split's ranks are translated).
  std::ostringstream m;
  m << "processes called different collectives: process " << c.worldOf[0] << " called " << describe(all.data());
  for (int p : differ) m << ", process " << c.worldOf[p] << " called " << describe(&all[p * kFp]);
  r.err = NetErr::kMismatch;
  r.message = m.str();
  for (int p : differ) r.culpritProcesses.push_back(c.worldOf[p]);
  return r;
}

NetResult startCollective(int commId, const char* what, int64_t kind, int64_t dtype, int64_t count, int64_t extra, int64_t timeoutMs,
                          std::function<NetResult(NetComm&, MPI_Request*)> post, std::string postWhat, NetDone done,
                          std::function<NetResult()> finish) {
  NetResult r;
  if (!ready(what, commId, r)) return r;
  auto mine = std::make_shared<std::vector<int64_t>>(kFp);
  auto all = std::make_shared<std::vector<int64_t>>();
  auto stage = std::make_shared<int>(0);
  Flow f;
  f.commId = commId;
  f.deadlineMs = nowMs() + timeoutMs;
  f.done = std::move(done);
  f.next = [=](Flow& fl) -> NetResult {
    NetResult out;
    if (*stage == 1) {
      // The exchange completed, so every fingerprint is here: a mismatch is reported as itself even
      // when the abort notice of a peer that saw it first arrived before this check ran.
      NetComm* exchanged = NetThread::get().comm(commId);
      if (exchanged) {
        out = compareFingerprints(*exchanged, *all);
        if (out.err != NetErr::kNone) return out;
      }
    }
    NetComm* c = ready(what, commId, out);
    if (!c) return out;
    if (*stage == 0) {
      // Posted when the flow starts: the communicator's flows before it have finished, so the sequence numbers agree.
      *stage = 1;
      *mine = {static_cast<int64_t>(++c->seq), kind, dtype, count, extra};
      all->assign(static_cast<size_t>(kFp) * c->size, 0);
      fl.what = std::string("net ") + kindName(kind) + " (fingerprint exchange, seq " + std::to_string((*mine)[0]) + ")";
      fl.fingerprint = true;
      int rc = MPI_Iallgather(mine->data(), kFp, MPI_INT64_T, all->data(), kFp, MPI_INT64_T, c->comm, &fl.req);
      if (rc != MPI_SUCCESS) {
        out.err = NetErr::kMpi;
        out.message = "MPI_Iallgather of the fingerprint failed: " + mpiErrorString(rc);
      }
      return out;
    }
    if (*stage == 1) {
      *stage = 2;
      fl.fingerprint = false;
      fl.what = postWhat;
      return post(*c, &fl.req);
    }
    fl.req = MPI_REQUEST_NULL;
    return finish ? finish() : out;
  };
  NetThread::get().startFlow(std::move(f));
  r.deferred = true;
  return r;
}

MPI_Datatype mpiType(int dtype) {
  switch (dtype) {
    case 0: return MPI_FLOAT;
    case 3: return MPI_INT32_T;
    case 4: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(int redop) {
  switch (redop) {
    case 0: return MPI_SUM;
    case 1: return MPI_PROD;
    case 2: return MPI_MAX;
    case 3: return MPI_MIN;
    default: return MPI_OP_NULL;  // avg is a sum here; the caller divides
  }
}

NetResult bad(const std::string& msg) {
  NetResult r;
  r.err = NetErr::kState;
  r.message = msg;
  return r;
}

NetResult started(int rc, const std::string& what) {
  NetResult r;
  if (rc != MPI_SUCCESS) {
    r.err = NetErr::kMpi;
    r.message = what + " failed to start in MPI: " + mpiErrorString(rc);
  }
  return r;
}

NetResult netAllReduce(void* buf, int64_t count, int dtype, int redop, int64_t timeoutMs, int commId, NetDone done) {
  MPI_Datatype ty = mpiType(dtype);
  MPI_Op op = mpiOp(redop);
  if (ty == MPI_DATATYPE_NULL || op == MPI_OP_NULL) return bad("net allReduce supports fp32 / int32 / int64 with sum / prod / max / min");
  if (count > INT_MAX) return bad("net allReduce: count exceeds MPI's int range");
  const std::string what = "net allReduce (MPI_Iallreduce)";
  return startCollective(commId, "net allReduce", kAllReduce, dtype, count, redop, timeoutMs, [=](NetComm& c, MPI_Request* req) {
    return started(MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), ty, op, c.comm, req), what);
  }, what, std::move(done));
}

NetResult netBroadcast(void* buf, int64_t nbytes, int rootProcess, int64_t timeoutMs, int commId, NetDone done) {
  if (nbytes > INT_MAX) return bad("net broadcast: size exceeds MPI's int range");
  NetComm* c = NetThread::get().comm(commId);
  if (c && (rootProcess < 0 || rootProcess >= c->size)) return bad("net broadcast: root process out of range");
  const std::string what = "net broadcast (MPI_Ibcast)";
  return startCollective(commId, "net broadcast", kBroadcast, -1, nbytes, rootProcess, timeoutMs, [=](NetComm& c, MPI_Request* req) {
    return started(MPI_Ibcast(buf, static_cast<int>(nbytes), MPI_BYTE, rootProcess, c.comm, req), what);
  }, what, std::move(done));
}

NetResult netAllGather(const void* send, void* recv, int64_t nbytes, int64_t timeoutMs, int commId, int64_t kind, NetDone done) {
  if (nbytes > INT_MAX) return bad("net allGather: size exceeds MPI's int range");
  const std::string what = "net allGather (MPI_Iallgather)";
  return startCollective(commId, "net allGather", kind == kAllToAllVCounts ? kAllToAllVCounts : kAllGather, -1, nbytes, 0, timeoutMs,
                         [=](NetComm& c, MPI_Request* req) {
                           return started(MPI_Iallgather(send, static_cast<int>(nbytes), MPI_BYTE, recv, static_cast<int>(nbytes), MPI_BYTE, c.comm, req), what);
                         },
                         what, std::move(done));
}

NetResult netBarrier(int64_t timeoutMs, int commId, NetDone done) {
  const std::string what = "net barrier (MPI_Ibarrier)";
  return startCollective(commId, "net barrier", kBarrier, -1, 0, 0, timeoutMs, [=](NetComm& c, MPI_Request* req) {
    return started(MPI_Ibarrier(c.comm, req), what);
  }, what, std::move(done));
}

NetResult netAllToAll(const void* send, void* recv, int64_t blockBytes, int64_t timeoutMs, int commId, NetDone done) {
  if (blockBytes > INT_MAX) return bad("net allToAll: a block exceeds MPI's int range");
  const std::string what = "net allToAll (MPI_Ialltoall)";
  return startCollective(commId, "net allToAll", kAllToAll, -1, blockBytes, 0, timeoutMs, [=](NetComm& c, MPI_Request* req) {
    return started(MPI_Ialltoall(send, static_cast<int>(blockBytes), MPI_BYTE, recv, static_cast<int>(blockBytes), MPI_BYTE, c.comm, req), what);
  }, what, std::move(done));
}

NetResult netReduceScatter(const void* send, void* recv, int64_t blockCount, int dtype, int redop, int64_t timeoutMs, int commId, NetDone done) {
  MPI_Datatype ty = mpiType(dtype);
  MPI_Op op = mpiOp(redop);
  if (ty == MPI_DATATYPE_NULL || op == MPI_OP_NULL) return bad("net reduceScatter supports fp32 / int32 / int64 with sum / prod / max / min");
  if (blockCount > INT_MAX) return bad("net reduceScatter: a block exceeds MPI's int range");
  const std::string what = "net reduceScatter (MPI_Ireduce_scatter_block)";
  return startCollective(commId, "net reduceScatter", kReduceScatter, dtype, blockCount, redop, timeoutMs, [=](NetComm& c, MPI_Request* req) {
    return started(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(blockCount), ty, op, c.comm, req), what);
  }, what, std::move(done));
}

}  // namespace ascent_mpi
