// The rollout KV cache's write: one op per layer puts a step's keys and values of every
// batch row into the cache at that row's own position (before it, the engine enqueued one
// copy per row, layer and k / v: 61% of an engine's stream ops in a GRPO step). Positions
// live on the device, so they are checked as the kernel runs: every row's range is checked
// before anything is written, so a bad position fails the op with the cache untouched.
#include <cstring>
#include <string>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

void CheckPositions(const KvWriteArgs& a) {
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t p = a.pos[b];
    if (p < 0 || p + a.count > a.Smax) {
      KernelError("kvCacheWrite: positions[" + std::to_string(b) + "] = " + std::to_string(p) + " does not leave room for " +
                      std::to_string(a.count) + " position(s) in a cache of " + std::to_string(a.Smax) +
                      " (it must lie in [0, " + std::to_string(a.Smax - a.count) + "]).",
                  {Num("row", static_cast<double>(b)), Num("position", static_cast<double>(p)),
                   Num("count", static_cast<double>(a.count)), Num("maxSeqLen", static_cast<double>(a.Smax))});
    }
  }
}

}  // namespace

void ref::KvWrite(const KvWriteArgs& a) {
  CheckPositions(a);
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t t = 0; t < a.count; ++t) {
      const int64_t src = (b * a.count + t) * a.row, dst = (b * a.Smax + a.pos[b] + t) * a.row;
      for (int64_t i = 0; i < a.row; ++i) {
        a.k_cache[dst + i] = a.k[src + i];
        a.v_cache[dst + i] = a.v[src + i];
      }
    }
  }
}

void fast::KvWrite(const KvWriteArgs& a) {
  CheckPositions(a);
  // A row's `count` positions are contiguous in both layouts: one copy per row and tensor.
  const size_t bytes = static_cast<size_t>(a.count * a.row) * sizeof(float);
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t src = b * a.count * a.row, dst = (b * a.Smax + a.pos[b]) * a.row;
    std::memcpy(a.k_cache + dst, a.k + src, bytes);
    std::memcpy(a.v_cache + dst, a.v + src, bytes);
  }
}

}  // namespace ascent::model
