#include "comm/flight_recorder.h"

#include <chrono>

namespace ascent {
namespace comm {

const char* OpStateName(OpState s) {
  switch (s) {
    case OpState::kEnqueued: return "enqueued";
    case OpState::kStarted: return "started";
    case OpState::kCompleted: return "completed";
    case OpState::kFailed: return "failed";
  }
  return "?";
}

double WallMs() {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return static_cast<double>(us) / 1000.0;
}

std::string OpMark::Describe() const {
  if (id == 0) return "none";
  return seq != 0 ? "#" + std::to_string(seq) + " " + op : op;
}

uint64_t FlightRecorder::Enqueued(uint64_t seq, const std::string& op, const std::string& fingerprint) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = next_id_++;
  FlightEntry& e = ring_[id % kCapacity];
  e = FlightEntry{};
  e.id = id;
  e.seq = seq;
  e.op = op;
  e.fingerprint = fingerprint;
  e.enqueued_ms = WallMs();
  enqueued_ = OpMark{id, seq, op, e.enqueued_ms};
  return id;
}

FlightEntry* FlightRecorder::Find(uint64_t id) {
  FlightEntry& e = ring_[id % kCapacity];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::Started(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightEntry* e = Find(id);
  if (!e) return;
  e->state = OpState::kStarted;
  e->started_ms = WallMs();
  started_ = OpMark{id, e->seq, e->op, e->started_ms};
}

void FlightRecorder::Ended(uint64_t id, bool ok, const std::string& error_code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++ended_;
  FlightEntry* e = Find(id);
  if (!e) return;
  e->state = ok ? OpState::kCompleted : OpState::kFailed;
  e->ended_ms = WallMs();
  e->error = error_code;
  if (ok) completed_ = OpMark{id, e->seq, e->op, e->ended_ms};
}

OpMark FlightRecorder::last_enqueued() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}
OpMark FlightRecorder::last_started() {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}
OpMark FlightRecorder::last_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

uint64_t FlightRecorder::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return (next_id_ - 1) - ended_;
}

std::vector<FlightEntry> FlightRecorder::Snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightEntry> out;
  uint64_t last = next_id_ - 1;
  uint64_t first = last >= kCapacity ? last - kCapacity + 1 : 1;
  for (uint64_t id = first; id <= last; ++id) {
    FlightEntry* e = Find(id);
    if (e) out.push_back(*e);
  }
  return out;
}

}  // namespace comm
}  // namespace ascent
