// Flight-recorder dump: one JSON file per aborted communicator, written by the
// thread that aborts it, into the communicator's traceDir (initRank option, else
// ASCENT_TRACE_DIR, else `${os.tmpdir()}/ascent-flight-recorder`), named
// `ascent-fr-<first 8 hex of id>-<unix ms>-<pid>.json`. `ascent trace <dir>`
// explains it. Format (version 1):
//
// {
//   "format": "ascent.flight-recorder", "version": 1,
//   "communicator": "<32 hex id>", "nranks": 4,
//   "world": true,                   // made by initRank (local ranks are world ranks); false: a split

//   "createdAtMs": 1.7e12,           // group creation, ms since the Unix epoch
//   "dumpedAtMs": 1.7e12,
//   "cause": { "code": "ASCENT_COLLECTIVE_TIMEOUT", "message": "...", "seq": 7 | null,
//              "culpritWorldRanks": [3] },  // world ranks at fault (timeout: the missing ones)
//   "ranks": [
//     { "rank": 0, "worldRank": 0, "device": 0,   // device -1: the rank never joined
//       "joined": true,
//       "lastEnqueued":  { "id": 9, "seq": 7 | null, "op": "allReduce", "atMs": ... } | null,
//       "lastStarted":   { ... } | null,
//       "lastCompleted": { ... } | null,
//       "entries": [                 // oldest first, at most 2000
//         { "id": 9,                 // per-rank op index (collectives and P2P)
//           "seq": 7 | null,         // collective sequence number; null for send/recv/group
//           "op": "allReduce",
//           "fingerprint": "allReduce(fp32, count=1024, op=sum)",
//           "state": "enqueued" | "started" | "completed" | "failed",
//           "enqueuedAtMs": ..., "startedAtMs": ... | null, "endedAtMs": ... | null,
//           "error": "ASCENT_COLLECTIVE_TIMEOUT" | null }
//       ] }
//   ]
// }
//
// The cause message is the one rank the abort came from saw, before the dump path
// was appended.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "comm/group.h"

namespace ascent {
namespace comm {
namespace {

std::string Quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::string Ms(double v) {
  if (v == 0) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

std::string SeqJson(uint64_t seq) { return seq == 0 || seq == kNoSeq ? "null" : std::to_string(seq); }

std::string MarkJson(const OpMark& m) {
  if (m.id == 0) return "null";
  return "{\"id\":" + std::to_string(m.id) + ",\"seq\":" + SeqJson(m.seq) + ",\"op\":" + Quote(m.op) +
         ",\"atMs\":" + Ms(m.ms) + "}";
}

// mkdir -p
bool MakeDirs(const std::string& dir) {
  if (dir.empty()) return false;
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    if (i < dir.size()) cur += dir[i];
  }
  return true;
}

}  // namespace

std::string CommGroup::DumpJson() {
  std::lock_guard<std::mutex> lock(abort_mu_);
  return DumpJsonLocked();
}

std::string CommGroup::DumpJsonLocked() {
  const Detail* c = cause_.Find("culpritWorldRanks");
  std::string culprits = RankList(c ? c->list : std::vector<int>{});
  std::string o = "{\"format\":\"ascent.flight-recorder\",\"version\":1,\"communicator\":" + Quote(id_) +
                  ",\"nranks\":" + std::to_string(nranks_) + ",\"world\":" + (is_world_ ? "true" : "false") +
                  ",\"createdAtMs\":" + Ms(created_ms_) +
                  ",\"dumpedAtMs\":" + Ms(WallMs()) + ",\"cause\":{\"code\":" + Quote(cause_.code) +
                  ",\"message\":" + Quote(cause_.message) + ",\"seq\":" + SeqJson(cause_seq_) + ",\"culpritWorldRanks\":" + culprits + "},\"ranks\":[";
  for (int r = 0; r < nranks_; ++r) {
    Slot& s = slot(r);
    int device;
    bool joined;
    {
      std::lock_guard<std::mutex> lock(join_mu_);
      device = s.device;
      joined = s.joined;
    }
    o += std::string(r ? "," : "") + "\n{\"rank\":" + std::to_string(r) + ",\"worldRank\":" + std::to_string(WorldRank(r)) +
         ",\"device\":" + std::to_string(device) +
         ",\"joined\":" + (joined ? "true" : "false") + ",\"lastEnqueued\":" + MarkJson(s.recorder.last_enqueued()) +
         ",\"lastStarted\":" + MarkJson(s.recorder.last_started()) +
         ",\"lastCompleted\":" + MarkJson(s.recorder.last_completed()) + ",\"entries\":[";
    std::vector<FlightEntry> entries = s.recorder.Snapshot();
    for (size_t i = 0; i < entries.size(); ++i) {
      const FlightEntry& e = entries[i];
      o += std::string(i ? "," : "") + "\n  {\"id\":" + std::to_string(e.id) + ",\"seq\":" + SeqJson(e.seq) +
           ",\"op\":" + Quote(e.op) + ",\"fingerprint\":" + Quote(e.fingerprint) + ",\"state\":\"" +
           OpStateName(e.state) + "\",\"enqueuedAtMs\":" + Ms(e.enqueued_ms) + ",\"startedAtMs\":" + Ms(e.started_ms) +
           ",\"endedAtMs\":" + Ms(e.ended_ms) + ",\"error\":" + (e.error.empty() ? "null" : Quote(e.error)) + "}";
    }
    o += "]}";
  }
  return o + "\n]}\n";
}

// Called with abort_mu_ held and cause_ set. Returns the path, or "" on failure.
std::string CommGroup::WriteDump() {
  if (!MakeDirs(trace_dir_)) return "";
  char name[128];
  std::snprintf(name, sizeof name, "/ascent-fr-%s-%.0f-%d.json", id_.substr(0, 8).c_str(), WallMs(),
                static_cast<int>(getpid()));
  std::string path = trace_dir_ + name;
  std::string tmp = path + ".tmp";
  std::string json = DumpJsonLocked();
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return "";
  bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  ok = (std::fclose(f) == 0) && ok;
  // Rename so a reader never sees a half-written dump.
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return "";
  }
  return path;
}

}  // namespace comm
}  // namespace ascent
