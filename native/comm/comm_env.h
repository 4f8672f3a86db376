// The communicator part of an env's state (one per main thread or worker), owned by
// its EnvData (env_data.h): the communicators this env's ranks hold and the
// rendezvous threads (initRank, split) it started. EnvData's cleanup hook runs
// Teardown before it stops the env's streams.
#pragma once

#include <napi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/futex.h"
#include "errors.h"

namespace ascent {

class EnvData;

namespace comm {

struct CommImpl;
struct Departures;

class CommEnv {
 public:
  // Runs `fn` on a rendezvous thread of this env (joined at teardown at the latest).
  void Spawn(std::function<void()> fn);
  // Remembered (weakly) so teardown can abort it.
  void AddComm(const std::shared_ptr<CommImpl>& impl);
  // Aborts every live communicator of this env, so peers fail now instead of after
  // the exec timeout and our own stream ops blocked in a collective wake and let
  // their stream threads be joined; then joins every rendezvous thread.
  void Teardown();

 private:
  // A thread that waits for a rendezvous. Joined after the abort woke it, so it
  // never posts to a dead env.
  struct Task {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void AbortAll();

  std::mutex mu_;
  std::vector<std::weak_ptr<CommImpl>> comms_;
  std::shared_ptr<Departures> departures_;
  std::vector<Task> tasks_;
};

// This env's communicator state (InvalidArgument before InitComm ran in this env).
CommEnv& GetCommEnv(Napi::Env env);
// Completes `token` (0: nobody awaits) with `error`, or successfully when null.
// Any thread.
void PostCompletion(EnvData* data, uint64_t token, const ErrorInfo* error);
// `ms` from now (capped, so "practically never" does not overflow).
Clock::time_point Deadline(double ms);

}  // namespace comm
}  // namespace ascent
