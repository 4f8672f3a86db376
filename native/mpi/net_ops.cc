// Collectives among processes (see net_ops.h).
#include "net_ops.h"

#include <climits>
#include <sstream>

namespace ascent_mpi {

namespace {

enum Kind : int64_t { kAllReduce = 1, kBroadcast = 2, kAllGather = 3, kBarrier = 4 };
const char* kindName(int64_t k) {
  switch (k) {
    case kAllReduce: return "allReduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "allGather";
    case kBarrier: return "barrier";
    default: return "?";
  }
}
constexpr int kFp = 5;  // seq, kind, dtype, count, redop/root

NetResult notReady(const char* what) {
  NetResult r;
  NetThread& t = NetThread::get();
  if (!t.initialized()) {
    r.err = NetErr::kState;
    r.message = std::string(what) + " needs MPI: call init() first (ascent launch under mpirun does).";
    return r;
  }
  std::string why = t.abortedBecause();
  if (!why.empty()) {
    r.err = NetErr::kAborted;
    r.message = std::string(what) + " refused: the job's network communicator is aborted: " + why;
    r.culpritProcesses = t.abortCulprits();
  }
  return r;
}

std::string describe(const int64_t* f) {
  std::ostringstream s;
  s << kindName(f[1]) << "(seq " << f[0] << ", dtype " << f[2] << ", count " << f[3] << ", " << (f[1] == kBroadcast ? "root " : "op ") << f[4] << ")";
  return s.str();
}

// Every process must call the same collective with the same shape, in the same order.
NetResult checkFingerprint(int64_t kind, int64_t dtype, int64_t count, int64_t extra, int64_t deadline) {
  NetThread& t = NetThread::get();
  int64_t mine[kFp] = {static_cast<int64_t>(t.nextSeq()), kind, dtype, count, extra};
  std::vector<int64_t> all(static_cast<size_t>(kFp) * t.size());
  MPI_Request req;
  int rc = MPI_Iallgather(mine, kFp, MPI_INT64_T, all.data(), kFp, MPI_INT64_T, t.coll(), &req);
  NetResult r;
  if (rc != MPI_SUCCESS) {
    r.err = NetErr::kMpi;
    r.message = "MPI_Iallgather of the fingerprint failed: " + mpiErrorString(rc);
    return r;
  }
  r = t.wait(&req, deadline, std::string("net ") + kindName(kind) + " (fingerprint exchange, seq " + std::to_string(mine[0]) + ")");
  if (r.err != NetErr::kNone) return r;
  std::vector<int> differ;
  for (int p = 0; p < t.size(); p++) {
    for (int i = 0; i < kFp; i++) {
      if (all[p * kFp + i] != all[i]) {
        differ.push_back(p);
        break;
      }
    }
  }
  if (differ.empty()) return r;
  std::ostringstream m;
  m << "processes called different collectives: process 0 called " << describe(all.data());
  for (int p : differ) m << ", process " << p << " called " << describe(&all[p * kFp]);
  r.err = NetErr::kMismatch;
  r.message = m.str();
  r.culpritProcesses = differ;
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

NetResult finish(int rc, MPI_Request* req, int64_t deadline, const std::string& what) {
  if (rc != MPI_SUCCESS) {
    NetResult r;
    r.err = NetErr::kMpi;
    r.message = what + " failed to start in MPI: " + mpiErrorString(rc);
    return r;
  }
  return NetThread::get().wait(req, deadline, what);
}

}  // namespace

NetResult netAllReduce(void* buf, int64_t count, int dtype, int redop, int64_t timeoutMs) {
  NetResult r = notReady("net allReduce");
  if (r.err != NetErr::kNone) return r;
  MPI_Datatype ty = mpiType(dtype);
  MPI_Op op = mpiOp(redop);
  if (ty == MPI_DATATYPE_NULL || op == MPI_OP_NULL) return bad("net allReduce supports fp32 / int32 / int64 with sum / prod / max / min");
  if (count > INT_MAX) return bad("net allReduce: count exceeds MPI's int range");
  const int64_t deadline = nowMs() + timeoutMs;
  r = checkFingerprint(kAllReduce, dtype, count, redop, deadline);
  if (r.err != NetErr::kNone) return r;
  MPI_Request req;
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(count), ty, op, NetThread::get().coll(), &req);
  return finish(rc, &req, deadline, "net allReduce (MPI_Iallreduce)");
}

NetResult netBroadcast(void* buf, int64_t nbytes, int rootProcess, int64_t timeoutMs) {
  NetResult r = notReady("net broadcast");
  if (r.err != NetErr::kNone) return r;
  if (nbytes > INT_MAX) return bad("net broadcast: size exceeds MPI's int range");
  if (rootProcess < 0 || rootProcess >= NetThread::get().size()) return bad("net broadcast: root process out of range");
  const int64_t deadline = nowMs() + timeoutMs;
  r = checkFingerprint(kBroadcast, -1, nbytes, rootProcess, deadline);
  if (r.err != NetErr::kNone) return r;
  MPI_Request req;
  int rc = MPI_Ibcast(buf, static_cast<int>(nbytes), MPI_BYTE, rootProcess, NetThread::get().coll(), &req);
  return finish(rc, &req, deadline, "net broadcast (MPI_Ibcast)");
}

NetResult netAllGather(const void* send, void* recv, int64_t nbytes, int64_t timeoutMs) {
  NetResult r = notReady("net allGather");
  if (r.err != NetErr::kNone) return r;
  if (nbytes > INT_MAX) return bad("net allGather: size exceeds MPI's int range");
  const int64_t deadline = nowMs() + timeoutMs;
  r = checkFingerprint(kAllGather, -1, nbytes, 0, deadline);
  if (r.err != NetErr::kNone) return r;
  MPI_Request req;
  int rc = MPI_Iallgather(send, static_cast<int>(nbytes), MPI_BYTE, recv, static_cast<int>(nbytes), MPI_BYTE, NetThread::get().coll(), &req);
  return finish(rc, &req, deadline, "net allGather (MPI_Iallgather)");
}

NetResult netBarrier(int64_t timeoutMs) {
  NetResult r = notReady("net barrier");
  if (r.err != NetErr::kNone) return r;
  const int64_t deadline = nowMs() + timeoutMs;
  r = checkFingerprint(kBarrier, -1, 0, 0, deadline);
  if (r.err != NetErr::kNone) return r;
  MPI_Request req;
  int rc = MPI_Ibarrier(NetThread::get().coll(), &req);
  return finish(rc, &req, deadline, "net barrier (MPI_Ibarrier)");
}

}  // namespace ascent_mpi
