// commFloorBench(nranks, bytes, iters) -> { p10Us, p50Us, p90Us, cpuUsPerOp, sleepsPerOp }
//
// The floor of back-to-back fp32 sum allReduces with no JS and no stream threads:
// `nranks` plain threads each call the real RunCollective (the same barrier, futex
// waits, reduction and copies as a communicator's stream thread) `iters` times on
// one fresh group. Times are bench/collectives.ts's: the p50 of the per-op cycle
// (when the slowest rank finished op i minus when it finished op i-1). cpuUsPerOp
// and sleepsPerOp (voluntary context switches) sum the rank threads' getrusage.
// What the full bench adds on top of this is the JS <-> native hand-off; what this
// costs is the native synchronization itself. Every result is checked (a wrong sum
// throws). Bench only: it blocks the calling JS thread until the ranks are done.
#include "bench/comm_floor.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "args.h"
#include "comm/collectives.h"
#include "comm/group.h"
#include "errors.h"

namespace ascent {
namespace {

struct RankRun {
  std::vector<double> ends_us;
  double cpu_us = 0;
  long sleeps = 0;
  std::exception_ptr error;
};

double ThreadCpuUs(const rusage& u) {
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

void RunRank(comm::CommGroup& g, int rank, uint64_t count, int iters, comm::Clock::time_point t0, RankRun& out) {
  try {
    std::vector<float> send(count, static_cast<float>(rank + 1)), recv(count, 0.f);
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    for (int i = 0; i < iters; ++i) {
      comm::Desc d;
      d.op = comm::CollOp::kAllReduce;
      d.dtype = DType::kF32;
      d.count = count;
      d.red = comm::RedOp::kSum;
      d.send = reinterpret_cast<const uint8_t*>(send.data());
      d.recv = reinterpret_cast<uint8_t*>(recv.data());
      d.seq = static_cast<uint64_t>(i) + 1;
      d.fingerprint = comm::Fingerprint(d);
      comm::RunCollective(g, rank, d, comm::Clock::now() + std::chrono::seconds(60), 60000);
      out.ends_us[i] = std::chrono::duration<double, std::micro>(comm::Clock::now() - t0).count();
    }
    getrusage(RUSAGE_THREAD, &after);
    out.cpu_us = ThreadCpuUs(after) - ThreadCpuUs(before);
    out.sleeps = after.ru_nvcsw - before.ru_nvcsw;
    const float want = static_cast<float>(g.nranks()) * (g.nranks() + 1) / 2;
    for (float v : recv) {
      if (v != want) {
        throw AscentException(ErrorInfo{kStreamError,
                                        "commFloorBench: rank " + std::to_string(rank) + " got " + std::to_string(v) +
                                            " but the sum is " + std::to_string(want) + ".",
                                        {}});
      }
    }
  } catch (...) {
    out.error = std::current_exception();
    g.Abort(ErrorInfo{kCommAborted, "commFloorBench: a rank failed", {}}, comm::kNoSeq, false);
  }
}

Napi::Value CommFloorBench(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    Reader r(info, "commFloorBench");
    const int nranks = static_cast<int>(r.Positive("nranks"));
    const uint64_t bytes = r.Positive("bytes");
    const int iters = static_cast<int>(r.Positive("iters"));
    if (nranks > 1024 || bytes % 4 != 0 || bytes > comm::kSmallBytes || iters < 2 || iters > 1000000) {
      r.Fail("commFloorBench expects nranks <= 1024, bytes a multiple of 4 up to " + std::to_string(comm::kSmallBytes) +
                 " and 2 <= iters <= 1000000.",
             {});
    }
    static std::atomic<uint64_t> calls{0};
    const std::string id = "comm-floor-bench-" + std::to_string(calls.fetch_add(1));
    std::vector<int> world(nranks);
    for (int i = 0; i < nranks; ++i) world[i] = i;
    std::vector<std::shared_ptr<comm::CommGroup>> joined;
    for (int i = 0; i < nranks; ++i) {
      joined.push_back(comm::GroupTable::Get().Join(id, nranks, i, i, "/tmp", world, true));
    }
    comm::CommGroup& g = *joined[0];
    std::vector<RankRun> runs(nranks);
    for (auto& run : runs) run.ends_us.assign(iters, 0);
    const auto t0 = comm::Clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < nranks; ++i) {
      threads.emplace_back(RunRank, std::ref(g), i, bytes / 4, iters, t0, std::ref(runs[i]));
    }
    for (auto& t : threads) t.join();
    for (auto& run : runs) {
      if (run.error) std::rethrow_exception(run.error);
    }
    std::vector<double> cycles;
    double prev = 0, cpu = 0, sleeps = 0;
    for (int i = 0; i < iters; ++i) {
      double end = 0;
      for (auto& run : runs) end = std::max(end, run.ends_us[i]);
      if (i > 0) cycles.push_back(end - prev);
      prev = end;
    }
    for (auto& run : runs) cpu += run.cpu_us, sleeps += run.sleeps;
    std::sort(cycles.begin(), cycles.end());
    auto pct = [&](double p) { return cycles[static_cast<size_t>(p * (cycles.size() - 1))]; };
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("p10Us", pct(0.1));
    o.Set("p50Us", pct(0.5));
    o.Set("p90Us", pct(0.9));
    o.Set("cpuUsPerOp", cpu / iters);
    o.Set("sleepsPerOp", sleeps / iters);
    return o;
  });
}

}  // namespace

void InitCommFloor(Napi::Env env, Napi::Object exports) {
  exports.Set("commFloorBench", Napi::Function::New<CommFloorBench>(env, "commFloorBench"));
}

}  // namespace ascent
