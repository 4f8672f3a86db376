#include "kernels/reference.h"

namespace ascent::ref {

void Fill(void* dst, DType t, size_t n, double value) {
  for (size_t i = 0; i < n; ++i) StoreScalar(dst, t, i, Scalar{false, 0, value});
}

void Arange(void* dst, DType t, size_t n, double start, double step) {
  for (size_t i = 0; i < n; ++i) {
    StoreScalar(dst, t, i, Scalar{false, 0, start + static_cast<double>(i) * step});
  }
}

void Cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
  for (size_t i = 0; i < n; ++i) StoreScalar(dst, dst_t, i, LoadScalar(src, src_t, i));
}

void Binary(BinaryOp op, DType t, void* out, const void* a, const void* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    Scalar x = LoadScalar(a, t, i);
    Scalar y = LoadScalar(b, t, i);
    Scalar r{};
    if (IsFloat(t)) {
      float fx = static_cast<float>(x.d), fy = static_cast<float>(y.d);
      float fr = op == BinaryOp::kAdd ? fx + fy : fx * fy;
      r = Scalar{false, 0, fr};
    } else {
      // Integer arithmetic wraps: do it in uint64 and let the store truncate.
      uint64_t ux = static_cast<uint64_t>(x.i), uy = static_cast<uint64_t>(y.i);
      uint64_t ur = op == BinaryOp::kAdd ? ux + uy : ux * uy;
      r = Scalar{true, static_cast<int64_t>(ur), 0};
    }
    StoreScalar(out, t, i, r);
  }
}

void Scale(DType t, void* out, const void* x, size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) {
    float v = static_cast<float>(LoadScalar(x, t, i).d);
    StoreScalar(out, t, i, Scalar{false, 0, v * alpha});
  }
}

void Axpy(DType t, void* y, const void* x, size_t n, float alpha) {
  for (size_t i = 0; i < n; ++i) {
    float xv = static_cast<float>(LoadScalar(x, t, i).d);
    float yv = static_cast<float>(LoadScalar(y, t, i).d);
    float ax = alpha * xv;
    StoreScalar(y, t, i, Scalar{false, 0, yv + ax});
  }
}

void Permute(const PermuteArgs& p) {
  size_t rank = p.shape.size();
  size_t total = 1;
  for (int64_t s : p.shape) total *= static_cast<size_t>(s);
  const auto* src = static_cast<const uint8_t*>(p.src);
  auto* dst = static_cast<uint8_t*>(p.dst);
  for (size_t lin = 0; lin < total; ++lin) {
    size_t rem = lin;
    int64_t src_elem = 0;
    for (size_t d = rank; d-- > 0;) {
      int64_t idx = static_cast<int64_t>(rem % static_cast<size_t>(p.shape[d]));
      rem /= static_cast<size_t>(p.shape[d]);
      src_elem += idx * p.src_strides[d];
    }
    std::memcpy(dst + lin * p.elem_size, src + static_cast<size_t>(src_elem) * p.elem_size, p.elem_size);
  }
}

void Matmul(const MatmulArgs& g) {
  for (int64_t b = 0; b < g.batch; ++b) {
    size_t a0 = static_cast<size_t>(b * g.m * g.k), b0 = static_cast<size_t>(b * g.k * g.n);
    size_t c0 = static_cast<size_t>(b * g.m * g.n);
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        float acc = 0.0f;
        for (int64_t p = 0; p < g.k; ++p) {
          size_t ai = a0 + static_cast<size_t>(g.trans_a ? p * g.m + i : i * g.k + p);
          size_t bi = b0 + static_cast<size_t>(g.trans_b ? j * g.k + p : p * g.n + j);
          float av = static_cast<float>(LoadScalar(g.a, g.in_dtype, ai).d);
          float bv = static_cast<float>(LoadScalar(g.b, g.in_dtype, bi).d);
          acc += av * bv;
        }
        StoreScalar(g.c, g.out_dtype, c0 + static_cast<size_t>(i * g.n + j), Scalar{false, 0, acc});
      }
    }
  }
}

}  // namespace ascent::ref
