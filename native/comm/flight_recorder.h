// Per-rank flight recorder: a ring of the last kCapacity communicator ops of one
// rank (collectives, P2P, split), each with its fingerprint, state and times. The
// ring is written by the JS thread (enqueue) and the stream thread (start / end),
// hence the mutex; it is read only when a dump is written (see dump.cc for the
// JSON format).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ascent {
namespace comm {

enum class OpState { kEnqueued, kStarted, kCompleted, kFailed };
const char* OpStateName(OpState s);

// Milliseconds since the Unix epoch (microsecond resolution).
double WallMs();

struct FlightEntry {
  uint64_t id = 0;    // per-rank op index, 1-based; 0 = empty slot
  uint64_t seq = 0;   // collective sequence number; 0 for P2P ops
  std::string op;     // "allReduce", "send", "groupEnd", ...
  std::string fingerprint;
  OpState state = OpState::kEnqueued;
  double enqueued_ms = 0, started_ms = 0, ended_ms = 0;
  std::string error;  // error code when failed
};

// Last enqueued / started / completed op of a rank, for timeout reports.
struct OpMark {
  uint64_t id = 0;
  uint64_t seq = 0;
  std::string op;
  double ms = 0;
  std::string Describe() const;  // "#7 allReduce" or "none"
};

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 2000;

  FlightRecorder() : ring_(kCapacity) {}

  // JS thread: returns the new entry's id.
  uint64_t Enqueued(uint64_t seq, const std::string& op, const std::string& fingerprint);
  void Started(uint64_t id);
  void Ended(uint64_t id, bool ok, const std::string& error_code = {});

  OpMark last_enqueued();
  OpMark last_started();
  OpMark last_completed();
  // Ops enqueued but not yet ended.
  uint64_t in_flight();
  // Entries oldest first.
  std::vector<FlightEntry> Snapshot();

 private:
  FlightEntry* Find(uint64_t id);  // null when overwritten

  std::mutex mu_;
  std::vector<FlightEntry> ring_;
  uint64_t next_id_ = 1;
  uint64_t ended_ = 0;
  OpMark enqueued_, started_, completed_;
};

}  // namespace comm
}  // namespace ascent
