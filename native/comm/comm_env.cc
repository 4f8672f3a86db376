#include "comm/comm_env.h"

#include <chrono>

#include "comm/communicator.h"

namespace ascent {
namespace comm {

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
}

void CommEnv::AbortAll() {
  std::vector<std::shared_ptr<CommImpl>> comms;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : comms_) {
      if (auto p = w.lock()) comms.push_back(std::move(p));
    }
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
    if (!g || c->destroyed || g->aborted()) continue;
    ErrorInfo info{kCommAborted,
                   g->Who(rank) + "'s worker exited (device " + std::to_string(device) + ") while communicator " +
                       g->short_id() + " was live.",
                   {Num("deadRank", g->WorldRank(rank)), Num("device", device)}};
    g->SetCulprits(info, {rank});  // the rank that left, never the peers it left waiting
    g->Abort(std::move(info), 0, g->AnyInFlight());
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
