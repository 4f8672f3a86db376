// Split among processes (see net_ops.h). MPI has no nonblocking split, so every
// process first meets in the fingerprint exchange (bounded by the deadline, and a
// mismatch if they disagree on the colors); once all have arrived the blocking
// MPI_Comm_split calls complete promptly. Known weak: they do block the net thread,
// so two splits of different communicators at once could wait on each other.
#include <sstream>

#include "net_common.h"
#include "net_ops.h"

namespace ascent_mpi {

NetResult netSplit(int parentId, const std::vector<int>& colors, const std::vector<uint8_t>& member, const std::string& keyPrefix, int64_t timeoutMs,
                   NetDone done) {
  if (member.size() != colors.size()) return bad("net split: one member flag per color is needed");
  int64_t digest = 0;
  for (int c : colors) digest = digest * 1000003 + c;
  auto post = [=](NetComm& parent, MPI_Request*) -> NetResult {
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
        t.markFailed(r.message);
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
      int id = t.addComm(std::move(c), keyPrefix + ":" + std::to_string(colors[i]));
      ids << (ids.tellp() > 1 ? "," : "") << "\"" << colors[i] << "\":" << id;
    }
    ids << "}";
    r.json = ids.str();
    return r;
  };
  return startCollective(parentId, "net split", kSplit, -1, static_cast<int64_t>(colors.size()), digest, timeoutMs, post, "net split (MPI_Comm_split)",
                         std::move(done));
}

}  // namespace ascent_mpi
