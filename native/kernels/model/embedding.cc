// Embedding lookup and its scatter-add backward. Token ids are checked as the
// kernel runs (they live on the device): an id outside [0, V) fails the op.
#include <cstring>
#include <string>

#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"

namespace ascent::model {
namespace {

inline int64_t CheckedId(const int32_t* ids, int64_t t, int64_t V, const char* op) {
  int32_t id = ids[t];
  if (id < 0 || id >= V) {
    KernelError(std::string(op) + ": token id " + std::to_string(id) + " at position " + std::to_string(t) +
                    " is outside the vocabulary [0, " + std::to_string(V) + ").",
                {Num("id", id), Num("position", static_cast<double>(t)), Num("vocab", static_cast<double>(V))});
  }
  return id;
}

}  // namespace

void ref::Embedding(const EmbeddingArgs& a) {
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t id = CheckedId(a.ids, t, a.V, "embedding");
    for (int64_t i = 0; i < a.H; ++i) {
      StoreScalar(a.out, a.dtype, static_cast<size_t>(t * a.H + i), LoadScalar(a.table, a.dtype, static_cast<size_t>(id * a.H + i)));
    }
  }
}

void fast::Embedding(const EmbeddingArgs& a) {
  const size_t row = static_cast<size_t>(a.H) * DTypeSize(a.dtype);
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t id = CheckedId(a.ids, t, a.V, "embedding");
    std::memcpy(static_cast<uint8_t*>(a.out) + t * row, static_cast<const uint8_t*>(a.table) + id * row, row);
  }
}

void ref::EmbeddingBackward(const EmbeddingBackwardArgs& a) {
  for (int64_t i = 0; i < a.V * a.H; ++i) a.dtable[i] = 0.0f;
  for (int64_t t = 0; t < a.T; ++t) {
    int64_t id = CheckedId(a.ids, t, a.V, "embeddingBackward");
    for (int64_t i = 0; i < a.H; ++i) a.dtable[id * a.H + i] += a.dy[t * a.H + i];
  }
}

void fast::EmbeddingBackward(const EmbeddingBackwardArgs& a) {
  // Check every id before touching dtable, so a failing op leaves no partial sums.
  for (int64_t t = 0; t < a.T; ++t) CheckedId(a.ids, t, a.V, "embeddingBackward");
  std::memset(a.dtable, 0, static_cast<size_t>(a.V * a.H) * sizeof(float));
  const VecOps& v = Vec();
  for (int64_t t = 0; t < a.T; ++t) v.axpy(a.dtable + a.ids[t] * a.H, 1.0f, a.dy + t * a.H, a.H);
}

}  // namespace ascent::model
