// The target check shared by the kernels that read token targets (cross-entropy, token
// log-probs, log-probs with entropy): a target equal to the ignore index marks a row to
// skip; any other target outside [0, V) fails the stream with an error naming it.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/model/vec.h"

namespace ascent::model {

inline bool IgnoredTarget(int32_t target, int64_t t, int64_t V, int32_t ignore, const char* op) {
  if (target == ignore) return true;
  if (target < 0 || target >= V) {
    KernelError(std::string(op) + ": target " + std::to_string(target) + " at position " + std::to_string(t) +
                    " is outside the vocabulary [0, " + std::to_string(V) + ") and is not the ignore index " +
                    std::to_string(ignore) + ".",
                {Num("target", target), Num("position", static_cast<double>(t)), Num("vocab", static_cast<double>(V))});
  }
  return false;
}

}  // namespace ascent::model
