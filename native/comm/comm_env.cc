#include "comm/comm_env.h"

#include <algorithm>
#include <chrono>

#include "comm/communicator.h"
#include "env_data.h"

namespace ascent {
namespace comm {

CommEnv& GetCommEnv(Napi::Env env) {
  EnvData* data = EnvData::Get(env);
  if (data == nullptr || !data->comm) ThrowInvalidArgument("Communicators were not initialised in this thread.");
  return *data->comm;
}

void PostCompletion(EnvData* data, uint64_t token, const ErrorInfo* error) {
  if (token == 0) return;
  auto c = std::make_unique<Completion>();
  c->token = token;
  if (error) {
    c->ok = false;
    c->error = *error;
  }
  data->Post(std::move(c));
}

Clock::time_point Deadline(double ms) {
  return Clock::now() + std::chrono::microseconds(static_cast<int64_t>(std::min(ms, 1e12) * 1000.0));
}

void CommEnv::Spawn(std::function<void()> fn) {
  std::vector<Task> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Task> live;
    for (auto& t : tasks_) (t.done->load() ? finished : live).push_back(std::move(t));
    tasks_.swap(live);
    auto done = std::make_shared<std::atomic<bool>>(false);
    tasks_.push_back(Task{std::thread([fn = std::move(fn), done] {
                            fn();
                            done->store(true);
                          }),
                          done});
  }
  for (auto& t : finished) t.thread.join();
}

void CommEnv::AddComm(const std::shared_ptr<CommImpl>& impl) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::weak_ptr<CommImpl>> live;
  for (auto& w : comms_) {
    if (!w.expired()) live.push_back(std::move(w));
  }
  live.push_back(impl);
  comms_.swap(live);
  if (!departures_) departures_ = std::make_shared<Departures>();
  impl->departures = departures_;
}

namespace {

void AbortLeft(const std::shared_ptr<CommGroup>& g, int rank, int device) {
  if (!g || g->aborted()) return;
  ErrorInfo info{kCommAborted,
                 g->Who(rank) + "'s worker exited (device " + std::to_string(device) + ") while communicator " + g->short_id() +
                     " was live.",
                 {Num("deadRank", g->WorldRank(rank)), Num("device", device)}};
  g->SetCulprits(info, {rank});  // the rank that left, never the peers it left waiting
  g->Abort(std::move(info), 0, g->AnyInFlight());
}

}  // namespace

void Departures::Add(const std::shared_ptr<CommGroup>& group, int rank, int device) {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Entry> live;
  for (auto& e : entries) {
    if (!e.group.expired()) live.push_back(std::move(e));
  }
  live.push_back(Entry{group, rank, device});
  entries.swap(live);
}

std::vector<Departures::Entry> Departures::Take() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Entry> out;
  out.swap(entries);
  return out;
}

void CommEnv::AbortAll() {
  std::vector<std::shared_ptr<CommImpl>> comms;
  std::shared_ptr<Departures> departures;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : comms_) {
      if (auto p = w.lock()) comms.push_back(std::move(p));
    }
    departures = departures_;
  }
  for (auto& c : comms) {
    std::shared_ptr<CommGroup> g;
    int rank, device;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      g = c->group;
      rank = c->rank;
      device = c->device;
    }
    if (c->destroyed) continue;
    AbortLeft(g, rank, device);
  }
  if (departures) {
    for (auto& e : departures->Take()) AbortLeft(e.group.lock(), e.rank, e.device);
  }
}

void CommEnv::Teardown() {
  AbortAll();
  std::vector<Task> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  // A split thread may publish its child group just after the abort above; abort
  // again until every rendezvous thread has returned (at most ~5 s), so the joins
  // cannot block for a whole connect timeout.
  for (int i = 0; i < 5000; ++i) {
    bool all_done = true;
    for (auto& t : tasks) all_done = all_done && t.done->load();
    if (all_done) break;
    AbortAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (auto& t : tasks) t.thread.join();
}

}  // namespace comm
}  // namespace ascent
