// MoE token routing on the device: dispatch (counting sort of slots by expert),
// gather of token rows into expert order, grouped matmul over the per-expert row
// ranges, and the weighted combine back to token order; each with its backward.
// Counts and offsets never leave the device: data-dependent values are validated
// here, when the kernel runs.
#include <cstring>
#include <string>
#include <vector>

#include "kernels/fast.h"
#include "kernels/model/model_kernels.h"
#include "kernels/model/vec.h"
#include "kernels/reference.h"

namespace ascent::model {
namespace {

void CheckExperts(const int32_t* idx, int64_t slots, int64_t E) {
  for (int64_t s = 0; s < slots; ++s) {
    if (idx[s] < 0 || idx[s] >= E) {
      KernelError("moeDispatch: indices[" + std::to_string(s) + "] = " + std::to_string(idx[s]) +
                      " is not an expert in [0, " + std::to_string(E) + ").",
                  {Num("slot", static_cast<double>(s)), Num("expert", idx[s]), Num("experts", static_cast<double>(E))});
    }
  }
}

// inv[slot] = row of order holding it; fails unless order is a permutation of [0, slots).
std::vector<int32_t> Inverse(const int32_t* order, int64_t slots, const char* op) {
  std::vector<int32_t> inv(static_cast<size_t>(slots), -1);
  for (int64_t r = 0; r < slots; ++r) {
    int32_t s = order[r];
    if (s < 0 || s >= slots || inv[s] != -1) {
      KernelError(std::string(op) + ": order[" + std::to_string(r) + "] = " + std::to_string(s) +
                      (s < 0 || s >= slots ? " is outside [0, " + std::to_string(slots) + ")" : " repeats an earlier row") +
                      "; order must be a permutation of the T*k slots (as moeDispatch makes it).",
                  {Num("row", static_cast<double>(r)), Num("slot", s)});
    }
    inv[s] = static_cast<int32_t>(r);
  }
  return inv;
}

void CheckOffsets(const int32_t* off, int64_t E, int64_t N, const char* op) {
  bool ok = off[0] == 0 && off[E] == N;
  for (int64_t e = 0; ok && e < E; ++e) ok = off[e] <= off[e + 1];
  if (!ok) {
    std::string list;
    for (int64_t e = 0; e <= E && e < 16; ++e) list += (e ? ", " : "") + std::to_string(off[e]);
    if (E >= 16) list += ", ...";
    KernelError(std::string(op) + ": offsets [" + list + "] must rise from 0 to the row count " + std::to_string(N) +
                    ". HINT: pass the offsets moeDispatch returned for these rows.",
                {Num("rows", static_cast<double>(N))});
  }
}

}  // namespace

void ref::MoeDispatch(const MoeDispatchArgs& a) {
  CheckExperts(a.indices, a.slots, a.E);
  int32_t r = 0;
  a.offsets[0] = 0;
  for (int64_t e = 0; e < a.E; ++e) {
    int32_t c = 0;
    for (int64_t s = 0; s < a.slots; ++s) {
      if (a.indices[s] == e) {
        a.order[r++] = static_cast<int32_t>(s);
        ++c;
      }
    }
    a.counts[e] = c;
    a.offsets[e + 1] = r;
  }
}

void fast::MoeDispatch(const MoeDispatchArgs& a) {
  CheckExperts(a.indices, a.slots, a.E);
  std::memset(a.counts, 0, static_cast<size_t>(a.E) * 4);
  for (int64_t s = 0; s < a.slots; ++s) ++a.counts[a.indices[s]];
  a.offsets[0] = 0;
  for (int64_t e = 0; e < a.E; ++e) a.offsets[e + 1] = a.offsets[e] + a.counts[e];
  std::vector<int32_t> next(a.offsets, a.offsets + a.E);
  for (int64_t s = 0; s < a.slots; ++s) a.order[next[a.indices[s]]++] = static_cast<int32_t>(s);
}

void ref::MoeGather(const MoeGatherArgs& a) {
  Inverse(a.order, a.T * a.k, "moeGather");
  for (int64_t r = 0; r < a.T * a.k; ++r) {
    for (int64_t i = 0; i < a.H; ++i) a.xs[r * a.H + i] = a.x[(a.order[r] / a.k) * a.H + i];
  }
}

void fast::MoeGather(const MoeGatherArgs& a) {
  Inverse(a.order, a.T * a.k, "moeGather");
  const size_t row = static_cast<size_t>(a.H) * 4;
  for (int64_t r = 0; r < a.T * a.k; ++r) std::memcpy(a.xs + r * a.H, a.x + (a.order[r] / a.k) * a.H, row);
}

void ref::MoeGatherBackward(const MoeGatherBackwardArgs& a) {
  std::vector<int32_t> inv = Inverse(a.order, a.T * a.k, "moeGatherBackward");
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t i = 0; i < a.H; ++i) {
      float s = 0;
      for (int64_t j = 0; j < a.k; ++j) s += a.dxs[inv[t * a.k + j] * a.H + i];
      a.dx[t * a.H + i] = s;
    }
  }
}

void fast::MoeGatherBackward(const MoeGatherBackwardArgs& a) {
  std::vector<int32_t> inv = Inverse(a.order, a.T * a.k, "moeGatherBackward");
  const VecOps& v = Vec();
  std::memset(a.dx, 0, static_cast<size_t>(a.T * a.H) * 4);
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t j = 0; j < a.k; ++j) v.axpy(a.dx + t * a.H, 1.0f, a.dxs + inv[t * a.k + j] * a.H, a.H);
  }
}

void ref::MoeCombine(const MoeCombineArgs& a) {
  std::vector<int32_t> inv = Inverse(a.order, a.T * a.k, "moeCombine");
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t i = 0; i < a.H; ++i) {
      float s = 0;
      for (int64_t j = 0; j < a.k; ++j) s += a.weights[t * a.k + j] * a.ys[inv[t * a.k + j] * a.H + i];
      a.y[t * a.H + i] = s;
    }
  }
}

void fast::MoeCombine(const MoeCombineArgs& a) {
  std::vector<int32_t> inv = Inverse(a.order, a.T * a.k, "moeCombine");
  const VecOps& v = Vec();
  std::memset(a.y, 0, static_cast<size_t>(a.T * a.H) * 4);
  for (int64_t t = 0; t < a.T; ++t) {
    for (int64_t j = 0; j < a.k; ++j) v.axpy(a.y + t * a.H, a.weights[t * a.k + j], a.ys + inv[t * a.k + j] * a.H, a.H);
  }
}

void ref::MoeCombineBackward(const MoeCombineBackwardArgs& a) {
  std::vector<int32_t> inv = Inverse(a.order, a.T * a.k, "moeCombineBackward");
  for (int64_t r = 0; r < a.T * a.k; ++r) {
    int64_t s = a.order[r], t = s / a.k;
    for (int64_t i = 0; i < a.H; ++i) a.dys[r * a.H + i] = a.weights[s] * a.dy[t * a.H + i];
  }
  for (int64_t s = 0; s < a.T * a.k; ++s) {
    double d = 0;
    for (int64_t i = 0; i < a.H; ++i) d += static_cast<double>(a.dy[(s / a.k) * a.H + i]) * a.ys[inv[s] * a.H + i];
    a.dweights[s] = static_cast<float>(d);
  }
}

void fast::MoeCombineBackward(const MoeCombineBackwardArgs& a) {
  Inverse(a.order, a.T * a.k, "moeCombineBackward");
  const VecOps& v = Vec();
  for (int64_t r = 0; r < a.T * a.k; ++r) {
    const int64_t s = a.order[r];
    const float* dy = a.dy + (s / a.k) * a.H;
    const float* ys = a.ys + r * a.H;
    float* dys = a.dys + r * a.H;
    const float w = a.weights[s];
    for (int64_t i = 0; i < a.H; ++i) dys[i] = w * dy[i];
    a.dweights[s] = v.dot(dy, ys, a.H);
  }
}

// ---- grouped matmul ---------------------------------------------------------------
// Expert e is one ordinary matmul on its row range; the reference and fast versions
// differ only in the matmul they call (kernels/reference.cc vs the blocked one).
namespace {

using MatmulFn = void (*)(const MatmulArgs&);

void Grouped(const GroupedMatmulArgs& a, MatmulFn mm, const char* op) {
  CheckOffsets(a.offsets, a.E, a.N, op);
  const size_t is = DTypeSize(a.in_dtype), os = DTypeSize(a.out_dtype);
  for (int64_t e = 0; e < a.E; ++e) {
    const int64_t r0 = a.offsets[e], n = a.offsets[e + 1] - r0;
    if (n == 0) continue;
    MatmulArgs g{a.in_dtype, a.out_dtype,
                 static_cast<const uint8_t*>(a.x) + r0 * a.K * is,
                 static_cast<const uint8_t*>(a.w) + e * a.K * a.M * is,
                 static_cast<uint8_t*>(a.y) + r0 * a.M * os,
                 1, n, a.M, a.K, false, a.trans_b};
    mm(g);
  }
}

void GroupedBackward(const GroupedMatmulBackwardArgs& a, MatmulFn mm, const char* op) {
  CheckOffsets(a.offsets, a.E, a.N, op);
  const size_t is = DTypeSize(a.in_dtype);
  for (int64_t e = 0; e < a.E; ++e) {
    const int64_t r0 = a.offsets[e], n = a.offsets[e + 1] - r0;
    const auto* dy = static_cast<const uint8_t*>(a.dy) + r0 * a.M * is;
    const auto* x = static_cast<const uint8_t*>(a.x) + r0 * a.K * is;
    const auto* w = static_cast<const uint8_t*>(a.w) + e * a.K * a.M * is;
    if (a.dx != nullptr && n > 0) {
      // trans_b: y = x W^T, W [M, K] -> dx = dy W.   else: y = x W, W [K, M] -> dx = dy W^T.
      mm(MatmulArgs{a.in_dtype, DType::kF32, dy, w, a.dx + r0 * a.K, 1, n, a.K, a.M, false, !a.trans_b});
    }
    if (a.dw != nullptr) {
      float* dw = a.dw + e * a.K * a.M;
      if (n == 0) {
        std::memset(dw, 0, static_cast<size_t>(a.K * a.M) * 4);
      } else if (a.trans_b) {
        mm(MatmulArgs{a.in_dtype, DType::kF32, dy, x, dw, 1, a.M, a.K, n, true, false});  // dW = dy^T x
      } else {
        mm(MatmulArgs{a.in_dtype, DType::kF32, x, dy, dw, 1, a.K, a.M, n, true, false});  // dW = x^T dy
      }
    }
  }
}

}  // namespace

void ref::GroupedMatmul(const GroupedMatmulArgs& a) { Grouped(a, ascent::ref::Matmul, "groupedMatmul"); }
void fast::GroupedMatmul(const GroupedMatmulArgs& a) { Grouped(a, ascent::fast::Matmul, "groupedMatmul"); }
void ref::GroupedMatmulBackward(const GroupedMatmulBackwardArgs& a) {
  GroupedBackward(a, ascent::ref::Matmul, "groupedMatmulBackward");
}
void fast::GroupedMatmulBackward(const GroupedMatmulBackwardArgs& a) {
  GroupedBackward(a, ascent::fast::Matmul, "groupedMatmulBackward");
}

}  // namespace ascent::model
