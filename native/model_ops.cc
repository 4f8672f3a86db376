// The checked enqueue point of the model kernels (native/kernels/model/): one JS
// method, stream.modelOp(name, ...args), dispatching through a table of handlers.
// Each handler reads its dims first, then every tensor as (buffer, byteOffset)
// with the exact byte extent those dims imply, checking device, alignment, bounds
// and output/input overlap synchronously (InvalidArgument, nothing enqueued), and
// finally enqueues one Op that keeps its blocks alive until it ran. TS
// (src/model/kernels/) validates first with precise messages; this is the safety
// net. Data-dependent checks (ids, offsets, lengths) happen in the kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "args.h"
#include "device/span.h"
#include "device/stream.h"
#include "kernels/model/decode_layer.h"
#include "kernels/model/fused_norm.h"
#include "kernels/model/gdn.h"
#include "kernels/model/model_kernels.h"
#include "op_table.h"

namespace ascent {
namespace {

using namespace ascent::model;

// Product of sizes, each step overflow-checked.
uint64_t Mul(std::initializer_list<uint64_t> xs, const char* what) {
  uint64_t r = 1;
  for (uint64_t x : xs) r = CheckedMul(r, x, what);
  return r;
}

// Reads impl and token (always the last two arguments) and enqueues fn(a).
template <typename A>
uint64_t Run(StreamImpl& s, const char* name, Reader& r, void (*ref_fn)(const A&), void (*fast_fn)(const A&), const A& a) {
  const bool reference = r.Impl();
  const uint64_t token = r.Token();
  void (*fn)(const A&) = reference ? ref_fn : fast_fn;
  return EnqueueOp(s, r, name, token, [fn, a](Op&) { fn(a); });
}

#define RUN(name, Kernel, args) Run(s, name, r, ref::Kernel, fast::Kernel, args)

constexpr DType F32 = DType::kF32, I32 = DType::kI32;
using U = uint64_t;

// embedding(dtype, T, V, H, ids, table, out)
U Embedding(StreamImpl& s, Reader& r) {
  DType dt = r.Dtype("dtype");
  if (dt != F32 && dt != DType::kBF16) r.Fail("table must be fp32 or bf16.");
  U T = r.Index("T"), V = r.Positive("V"), H = r.Index("H");
  Span ids = r.Tensor("ids", T, I32), table = r.Tensor("table", Mul({V, H}, "table"), dt);
  Span out = r.Tensor("out", Mul({T, H}, "out"), dt);
  r.CheckOutputs({"out"});
  EmbeddingArgs a{dt, ids.as<int32_t>(), table.ptr(), out.ptr(), (int64_t)T, (int64_t)V, (int64_t)H};
  return RUN("embedding", Embedding, a);
}

// embeddingBackward(T, V, H, ids, dy, dtable)
U EmbeddingBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), V = r.Positive("V"), H = r.Index("H");
  Span ids = r.Tensor("ids", T, I32), dy = r.Tensor("dy", Mul({T, H}, "dy"), F32);
  Span dt = r.Tensor("dtable", Mul({V, H}, "dtable"), F32);
  r.CheckOutputs({"dtable"});
  EmbeddingBackwardArgs a{ids.as<int32_t>(), dy.as<float>(), dt.as<float>(), (int64_t)T, (int64_t)V, (int64_t)H};
  return RUN("embeddingBackward", EmbeddingBackward, a);
}

// rmsNorm(T, H, eps, x, w, y, rstd)
U RmsNorm(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), H = r.Positive("H");
  double eps = r.Number("eps");
  Span x = r.Tensor("x", Mul({T, H}, "x"), F32), w = r.Tensor("w", H, F32);
  Span y = r.Tensor("y", Mul({T, H}, "y"), F32), rstd = r.Tensor("rstd", T, F32);
  r.CheckOutputs({"y", "rstd"});
  RmsNormArgs a{x.as<float>(), w.as<float>(), y.as<float>(), rstd.as<float>(), (int64_t)T, (int64_t)H, (float)eps};
  return RUN("rmsNorm", RmsNorm, a);
}

// rmsNormBackward(T, H, dy, x, w, rstd, dx, dw)
U RmsNormBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), H = r.Positive("H");
  Span dy = r.Tensor("dy", Mul({T, H}, "dy"), F32), x = r.Tensor("x", Mul({T, H}, "x"), F32);
  Span w = r.Tensor("w", H, F32), rstd = r.Tensor("rstd", T, F32);
  Span dx = r.Tensor("dx", Mul({T, H}, "dx"), F32), dw = r.Tensor("dw", H, F32);
  r.CheckOutputs({"dx", "dw"});
  RmsNormBackwardArgs a{dy.as<float>(), x.as<float>(), w.as<float>(), rstd.as<float>(), dx.as<float>(), dw.as<float>(),
                        (int64_t)T, (int64_t)H};
  return RUN("rmsNormBackward", RmsNormBackward, a);
}

// rope(T, heads, D, invFreq: Float64Array[D/2], scale, inverse, x, positions, y); y may be exactly x.
U Rope(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), heads = r.Index("heads"), D = r.Positive("D");
  if (D % 2 != 0) r.Fail("head dim D must be even.");
  // The table is copied here and owned by the op, so the caller's array may change after the call.
  auto table = std::make_shared<std::vector<double>>(r.Doubles("invFreq", static_cast<size_t>(D / 2)));
  double scale = r.Number("scale");
  if (!(scale > 0) || !std::isfinite(scale)) r.Fail("scale must be a positive finite number.");
  bool inverse = r.Bool("inverse");
  Span x = r.Tensor("x", Mul({T, heads, D}, "x"), F32), pos = r.Tensor("positions", T, I32);
  Span y = r.Tensor("y", Mul({T, heads, D}, "y"), F32);
  r.CheckOutputs({"y"}, {{"y", "x"}});
  RopeArgs a{x.as<float>(), pos.as<int32_t>(), y.as<float>(), table->data(), (int64_t)T, (int64_t)heads, (int64_t)D, scale, inverse};
  const bool reference = r.Impl();
  const uint64_t token = r.Token();
  void (*fn)(const RopeArgs&) = reference ? ref::Rope : fast::Rope;
  return EnqueueOp(s, r, inverse ? "ropeBackward" : "rope", token, [fn, a, table](Op&) { fn(a); });
}

void CheckHeads(Reader& r, U nH, U nKV) {
  if (nH % nKV != 0) r.Fail("query heads (" + std::to_string(nH) + ") must be a multiple of kv heads (" + std::to_string(nKV) + ").");
}

// attention(B, S, nH, nKV, D, q, k, v, o, lse)
U Attention(StreamImpl& s, Reader& r) {
  U B = r.Index("B"), S = r.Index("S"), nH = r.Positive("nH"), nKV = r.Positive("nKV"), D = r.Positive("D");
  CheckHeads(r, nH, nKV);
  Span q = r.Tensor("q", Mul({B, S, nH, D}, "q"), F32), k = r.Tensor("k", Mul({B, S, nKV, D}, "k"), F32);
  Span v = r.Tensor("v", Mul({B, S, nKV, D}, "v"), F32);
  Span o = r.Tensor("o", Mul({B, S, nH, D}, "o"), F32), lse = r.Tensor("lse", Mul({B, nH, S}, "lse"), F32);
  r.CheckOutputs({"o", "lse"});
  AttentionArgs a{q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(), lse.as<float>(),
                  (int64_t)B, (int64_t)S, (int64_t)nH, (int64_t)nKV, (int64_t)D};
  return RUN("attention", Attention, a);
}

// attentionBackward(B, S, nH, nKV, D, dout, q, k, v, o, lse, dq, dk, dv)
U AttentionBackward(StreamImpl& s, Reader& r) {
  U B = r.Index("B"), S = r.Index("S"), nH = r.Positive("nH"), nKV = r.Positive("nKV"), D = r.Positive("D");
  CheckHeads(r, nH, nKV);
  U nq = Mul({B, S, nH, D}, "q"), nk = Mul({B, S, nKV, D}, "k");
  Span dout = r.Tensor("dout", nq, F32), q = r.Tensor("q", nq, F32), k = r.Tensor("k", nk, F32);
  Span v = r.Tensor("v", nk, F32), o = r.Tensor("o", nq, F32), lse = r.Tensor("lse", Mul({B, nH, S}, "lse"), F32);
  Span dq = r.Tensor("dq", nq, F32), dk = r.Tensor("dk", nk, F32), dv = r.Tensor("dv", nk, F32);
  r.CheckOutputs({"dq", "dk", "dv"});
  AttentionBackwardArgs a{dout.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), o.as<float>(), lse.as<float>(),
                          dq.as<float>(), dk.as<float>(), dv.as<float>(),
                          (int64_t)B, (int64_t)S, (int64_t)nH, (int64_t)nKV, (int64_t)D};
  return RUN("attentionBackward", AttentionBackward, a);
}

// attentionDecode(B, Smax, nH, nKV, D, q, kCache, vCache, lengths, o)
U AttentionDecode(StreamImpl& s, Reader& r) {
  U B = r.Index("B"), Smax = r.Index("Smax"), nH = r.Positive("nH"), nKV = r.Positive("nKV"), D = r.Positive("D");
  CheckHeads(r, nH, nKV);
  Span q = r.Tensor("q", Mul({B, nH, D}, "q"), F32), k = r.Tensor("kCache", Mul({B, Smax, nKV, D}, "kCache"), F32);
  Span v = r.Tensor("vCache", Mul({B, Smax, nKV, D}, "vCache"), F32), len = r.Tensor("lengths", B, I32);
  Span o = r.Tensor("o", Mul({B, nH, D}, "o"), F32);
  r.CheckOutputs({"o"});
  AttentionDecodeArgs a{q.as<float>(), k.as<float>(), v.as<float>(), len.as<int32_t>(), o.as<float>(),
                        (int64_t)B, (int64_t)Smax, (int64_t)nH, (int64_t)nKV, (int64_t)D};
  return RUN("attentionDecode", AttentionDecode, a);
}

// kvCacheWrite(B, count, Smax, row, k, v, positions, kCache, vCache): kCache / vCache are
// the first B rows [B, Smax, row] of a layer's cache, written in place at positions[b].
U KvCacheWrite(StreamImpl& s, Reader& r) {
  U B = r.Index("B"), count = r.Index("count"), Smax = r.Index("Smax"), row = r.Index("row");
  if (count > Smax) r.Fail("count (" + std::to_string(count) + ") exceeds the cache's Smax (" + std::to_string(Smax) + ").");
  U n = Mul({B, count, row}, "k"), nc = Mul({B, Smax, row}, "kCache");
  Span k = r.Tensor("k", n, F32), v = r.Tensor("v", n, F32), pos = r.Tensor("positions", B, I32);
  Span kc = r.Tensor("kCache", nc, F32), vc = r.Tensor("vCache", nc, F32);
  r.CheckOutputs({"kCache", "vCache"});
  KvWriteArgs a{k.as<float>(), v.as<float>(), pos.as<int32_t>(), kc.as<float>(), vc.as<float>(),
                (int64_t)B, (int64_t)count, (int64_t)Smax, (int64_t)row};
  const bool reference = r.Impl();
  auto op = std::make_unique<Op>();
  op->name = "kvCacheWrite";
  op->token = r.Token();
  void (*fn)(const KvWriteArgs&) = reference ? ref::KvWrite : fast::KvWrite;
  op->run = [fn, a](Op&) { fn(a); };
  op->keep = r.Blocks();
  // Whether it may run inline is decided by the bytes it moves (k and v in, as many out),
  // not by the whole cache spans it is given: a decode step's write is as small as the
  // per-row copies it replaces, which ran inline.
  op->may_inline = Mul({n, 4 * sizeof(float)}, "k") + B * sizeof(int32_t) <= kInlineMaxBytes;
  return s.Enqueue(std::move(op));
}

// Elements spanned by N rows of width I at a row stride.
U Strided(Reader& r, U N, U I, U stride, const char* name) {
  if (stride < I) r.Fail(std::string("row stride of ") + name + " is smaller than the row width.");
  return N == 0 ? 0 : Mul({N - 1, stride}, name) + I;
}

// swiglu(N, I, gStride, uStride, g, u, h)
U Swiglu(StreamImpl& s, Reader& r) {
  U N = r.Index("N"), I = r.Index("I"), gs = r.Index("gStride"), us = r.Index("uStride");
  Span g = r.Tensor("gate", Strided(r, N, I, gs, "gate"), F32), u = r.Tensor("up", Strided(r, N, I, us, "up"), F32);
  Span h = r.Tensor("h", Mul({N, I}, "h"), F32);
  r.CheckOutputs({"h"});
  SwigluArgs a{g.as<float>(), u.as<float>(), h.as<float>(), (int64_t)N, (int64_t)I, (int64_t)gs, (int64_t)us};
  return RUN("swiglu", Swiglu, a);
}

// swigluBackward(N, I, gStride, uStride, dh, g, u, dg, du): dg / du may interleave
// (halves of one fused gradient) but must not overlap the inputs.
U SwigluBackward(StreamImpl& s, Reader& r) {
  U N = r.Index("N"), I = r.Index("I"), gs = r.Index("gStride"), us = r.Index("uStride");
  Span dh = r.Tensor("dh", Mul({N, I}, "dh"), F32);
  Span g = r.Tensor("gate", Strided(r, N, I, gs, "gate"), F32), u = r.Tensor("up", Strided(r, N, I, us, "up"), F32);
  Span dg = r.Tensor("dGate", Strided(r, N, I, gs, "dGate"), F32), du = r.Tensor("dUp", Strided(r, N, I, us, "dUp"), F32);
  r.CheckOutputs({"dGate", "dUp"}, {}, {{"dGate", "dUp"}});
  if (dg.block == du.block && N > 0 && I > 0) {
    // Interleaved halves of one fused row are fine when their column ranges are disjoint
    // and stay disjoint on every row (same stride, shift at least I, rows not reaching
    // into the next row's other half).
    U lo = std::min(dg.offset, du.offset), hi = std::max(dg.offset, du.offset);
    bool disjoint = gs == us && hi - lo >= I * 4 && (hi - lo) + I * 4 <= gs * 4;
    bool apart = lo + Strided(r, N, I, gs, "dGate") * 4 <= hi;
    if (!disjoint && !apart) r.Fail("dGate and dUp overlap.");
  }
  SwigluBackwardArgs a{dh.as<float>(), g.as<float>(), u.as<float>(), dg.as<float>(), du.as<float>(),
                       (int64_t)N, (int64_t)I, (int64_t)gs, (int64_t)us};
  return RUN("swigluBackward", SwigluBackward, a);
}

// router(T, E, k, renorm, logits, probs, weights, indices)
U Router(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), E = r.Positive("E"), k = r.Positive("k");
  if (k > E) r.Fail("k must be at most the number of experts.");
  bool renorm = r.Bool("renorm");
  Span z = r.Tensor("logits", Mul({T, E}, "logits"), F32), p = r.Tensor("probs", Mul({T, E}, "probs"), F32);
  Span w = r.Tensor("weights", Mul({T, k}, "weights"), F32), idx = r.Tensor("indices", Mul({T, k}, "indices"), I32);
  r.CheckOutputs({"probs", "weights", "indices"});
  RouterArgs a{z.as<float>(), p.as<float>(), w.as<float>(), idx.as<int32_t>(), (int64_t)T, (int64_t)E, (int64_t)k, renorm};
  return RUN("routerTopK", Router, a);
}

// routerBackward(T, E, k, renorm, dweights, probs, indices, dlogits)
U RouterBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), E = r.Positive("E"), k = r.Positive("k");
  if (k > E) r.Fail("k must be at most the number of experts.");
  bool renorm = r.Bool("renorm");
  Span dw = r.Tensor("dWeights", Mul({T, k}, "dWeights"), F32), p = r.Tensor("probs", Mul({T, E}, "probs"), F32);
  Span idx = r.Tensor("indices", Mul({T, k}, "indices"), I32), dz = r.Tensor("dLogits", Mul({T, E}, "dLogits"), F32);
  r.CheckOutputs({"dLogits"});
  RouterBackwardArgs a{dw.as<float>(), p.as<float>(), idx.as<int32_t>(), dz.as<float>(), (int64_t)T, (int64_t)E, (int64_t)k, renorm};
  return RUN("routerBackward", RouterBackward, a);
}

// moeDispatch(slots, E, indices, counts, offsets, order)
U MoeDispatch(StreamImpl& s, Reader& r) {
  U slots = r.Index("slots"), E = r.Positive("E");
  if (slots > 2147483647u) r.Fail("too many slots for int32 order.");
  Span idx = r.Tensor("indices", slots, I32), counts = r.Tensor("counts", E, I32);
  Span offsets = r.Tensor("offsets", E + 1, I32), order = r.Tensor("order", slots, I32);
  r.CheckOutputs({"counts", "offsets", "order"});
  MoeDispatchArgs a{idx.as<int32_t>(), counts.as<int32_t>(), offsets.as<int32_t>(), order.as<int32_t>(), (int64_t)slots, (int64_t)E};
  return RUN("moeDispatch", MoeDispatch, a);
}

// moeGather(T, k, H, x, order, xs)
U MoeGather(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), k = r.Positive("k"), H = r.Index("H");
  Span x = r.Tensor("x", Mul({T, H}, "x"), F32), order = r.Tensor("order", Mul({T, k}, "order"), I32);
  Span xs = r.Tensor("xs", Mul({T, k, H}, "xs"), F32);
  r.CheckOutputs({"xs"});
  MoeGatherArgs a{x.as<float>(), order.as<int32_t>(), xs.as<float>(), (int64_t)T, (int64_t)k, (int64_t)H};
  return RUN("moeGather", MoeGather, a);
}

// moeGatherBackward(T, k, H, dxs, order, dx)
U MoeGatherBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), k = r.Positive("k"), H = r.Index("H");
  Span dxs = r.Tensor("dXs", Mul({T, k, H}, "dXs"), F32), order = r.Tensor("order", Mul({T, k}, "order"), I32);
  Span dx = r.Tensor("dX", Mul({T, H}, "dX"), F32);
  r.CheckOutputs({"dX"});
  MoeGatherBackwardArgs a{dxs.as<float>(), order.as<int32_t>(), dx.as<float>(), (int64_t)T, (int64_t)k, (int64_t)H};
  return RUN("moeGatherBackward", MoeGatherBackward, a);
}

// moeCombine(T, k, H, ys, order, weights, y)
U MoeCombine(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), k = r.Positive("k"), H = r.Index("H");
  Span ys = r.Tensor("ys", Mul({T, k, H}, "ys"), F32), order = r.Tensor("order", Mul({T, k}, "order"), I32);
  Span w = r.Tensor("weights", Mul({T, k}, "weights"), F32), y = r.Tensor("y", Mul({T, H}, "y"), F32);
  r.CheckOutputs({"y"});
  MoeCombineArgs a{ys.as<float>(), order.as<int32_t>(), w.as<float>(), y.as<float>(), (int64_t)T, (int64_t)k, (int64_t)H};
  return RUN("moeCombine", MoeCombine, a);
}

// moeCombineBackward(T, k, H, dy, ys, order, weights, dys, dweights)
U MoeCombineBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), k = r.Positive("k"), H = r.Index("H");
  Span dy = r.Tensor("dY", Mul({T, H}, "dY"), F32), ys = r.Tensor("ys", Mul({T, k, H}, "ys"), F32);
  Span order = r.Tensor("order", Mul({T, k}, "order"), I32), w = r.Tensor("weights", Mul({T, k}, "weights"), F32);
  Span dys = r.Tensor("dYs", Mul({T, k, H}, "dYs"), F32), dw = r.Tensor("dWeights", Mul({T, k}, "dWeights"), F32);
  r.CheckOutputs({"dYs", "dWeights"});
  MoeCombineBackwardArgs a{dy.as<float>(), ys.as<float>(), order.as<int32_t>(), w.as<float>(), dys.as<float>(),
                           dw.as<float>(), (int64_t)T, (int64_t)k, (int64_t)H};
  return RUN("moeCombineBackward", MoeCombineBackward, a);
}

DType MatmulDtype(Reader& r, const char* name) {
  DType t = r.Dtype(name);
  if (t != F32 && t != DType::kBF16) r.Fail(std::string(name) + " must be fp32 or bf16.");
  return t;
}

// groupedMatmul(inDtype, outDtype, N, K, M, E, transB, x, w, offsets, y)
U GroupedMatmul(StreamImpl& s, Reader& r) {
  DType in = MatmulDtype(r, "inDtype"), out = MatmulDtype(r, "outDtype");
  U N = r.Index("N"), K = r.Index("K"), M = r.Index("M"), E = r.Positive("E");
  bool tb = r.Bool("transB");
  Span x = r.Tensor("x", Mul({N, K}, "x"), in), w = r.Tensor("w", Mul({E, K, M}, "w"), in);
  Span off = r.Tensor("offsets", E + 1, I32), y = r.Tensor("y", Mul({N, M}, "y"), out);
  r.CheckOutputs({"y"});
  GroupedMatmulArgs a{in, out, x.ptr(), w.ptr(), off.as<int32_t>(), y.ptr(), (int64_t)N, (int64_t)K, (int64_t)M, (int64_t)E, tb};
  return RUN("groupedMatmul", GroupedMatmul, a);
}

// groupedMatmulBackward(inDtype, N, K, M, E, transB, dy, x, w, offsets, dx | null, dw | null)
U GroupedMatmulBackward(StreamImpl& s, Reader& r) {
  DType in = MatmulDtype(r, "inDtype");
  U N = r.Index("N"), K = r.Index("K"), M = r.Index("M"), E = r.Positive("E");
  bool tb = r.Bool("transB");
  Span dy = r.Tensor("dY", Mul({N, M}, "dY"), in), x = r.Tensor("x", Mul({N, K}, "x"), in);
  Span w = r.Tensor("w", Mul({E, K, M}, "w"), in), off = r.Tensor("offsets", E + 1, I32);
  Span dx = r.Tensor("dX", Mul({N, K}, "dX"), F32, true), dw = r.Tensor("dW", Mul({E, K, M}, "dW"), F32, true);
  r.CheckOutputs({"dX", "dW"});
  GroupedMatmulBackwardArgs a{in, dy.ptr(), x.ptr(), w.ptr(), off.as<int32_t>(), dx.as<float>(), dw.as<float>(),
                              (int64_t)N, (int64_t)K, (int64_t)M, (int64_t)E, tb};
  return RUN("groupedMatmulBackward", GroupedMatmulBackward, a);
}

// logSoftmax(T, V, logits, out)
U LogSoftmax(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), V = r.Positive("V");
  Span z = r.Tensor("logits", Mul({T, V}, "logits"), F32), out = r.Tensor("out", Mul({T, V}, "out"), F32);
  r.CheckOutputs({"out"});
  LogSoftmaxArgs a{z.as<float>(), out.as<float>(), (int64_t)T, (int64_t)V};
  return RUN("logSoftmax", LogSoftmax, a);
}

double Scale(Reader& r) {
  double scale = r.Number("scale");
  if (!(scale > 0) || !std::isfinite(scale)) r.Fail("scale (1 / temperature) must be positive and finite.");
  return scale;
}

// crossEntropy(mode, T, V, ignoreIndex, scale, logits, targets, loss, lse)
U CrossEntropy(StreamImpl& s, Reader& r) {
  U mode = r.Index("mode");
  if (mode > 1) r.Fail("mode must be 0 (loss) or 1 (logprob).");
  U T = r.Index("T"), V = r.Positive("V");
  int64_t ignore = r.Int("ignoreIndex");
  double scale = Scale(r);
  Span z = r.Tensor("logits", Mul({T, V}, "logits"), F32), tg = r.Tensor("targets", T, I32);
  Span loss = r.Tensor("loss", T, F32), lse = r.Tensor("lse", T, F32);
  r.CheckOutputs({"loss", "lse"});
  CrossEntropyArgs a{z.as<float>(), tg.as<int32_t>(), loss.as<float>(), lse.as<float>(), (int64_t)T, (int64_t)V,
                     (int32_t)ignore, static_cast<CeMode>(mode), (float)scale};
  return RUN(mode == 0 ? "crossEntropy" : "tokenLogprobs", CrossEntropy, a);
}

// crossEntropyBackward(T, V, ignoreIndex, scale, dloss, logits, targets, lse, dlogits)
U CrossEntropyBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), V = r.Positive("V");
  int64_t ignore = r.Int("ignoreIndex");
  double scale = Scale(r);
  Span dl = r.Tensor("dLoss", T, F32), z = r.Tensor("logits", Mul({T, V}, "logits"), F32);
  Span tg = r.Tensor("targets", T, I32), lse = r.Tensor("lse", T, F32);
  Span dz = r.Tensor("dLogits", Mul({T, V}, "dLogits"), F32);
  r.CheckOutputs({"dLogits"});
  CrossEntropyBackwardArgs a{dl.as<float>(), z.as<float>(), tg.as<int32_t>(), lse.as<float>(), dz.as<float>(),
                             (int64_t)T, (int64_t)V, (int32_t)ignore, (float)scale};
  return RUN("crossEntropyBackward", CrossEntropyBackward, a);
}

// tokenLogprobsEntropy(T, V, ignoreIndex, scale, logits, targets, out [2T], lse)
U TokenLogprobsEntropy(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), V = r.Positive("V");
  int64_t ignore = r.Int("ignoreIndex");
  double scale = Scale(r);
  Span z = r.Tensor("logits", Mul({T, V}, "logits"), F32), tg = r.Tensor("targets", T, I32);
  Span out = r.Tensor("out", Mul({2, T}, "out"), F32), lse = r.Tensor("lse", T, F32);
  r.CheckOutputs({"out", "lse"});
  LogprobEntropyArgs a{z.as<float>(), tg.as<int32_t>(), out.as<float>(), lse.as<float>(), (int64_t)T, (int64_t)V, (int32_t)ignore, (float)scale};
  return RUN("tokenLogprobsEntropy", TokenLogprobsEntropy, a);
}

// tokenLogprobsEntropyBackward(T, V, ignoreIndex, scale, dOut [2T], logits, targets, lse, out [2T], dLogits)
U TokenLogprobsEntropyBackward(StreamImpl& s, Reader& r) {
  U T = r.Index("T"), V = r.Positive("V");
  int64_t ignore = r.Int("ignoreIndex");
  double scale = Scale(r);
  Span dout = r.Tensor("dOut", Mul({2, T}, "dOut"), F32), z = r.Tensor("logits", Mul({T, V}, "logits"), F32);
  Span tg = r.Tensor("targets", T, I32), lse = r.Tensor("lse", T, F32), out = r.Tensor("out", Mul({2, T}, "out"), F32);
  Span dz = r.Tensor("dLogits", Mul({T, V}, "dLogits"), F32);
  r.CheckOutputs({"dLogits"});
  LogprobEntropyBackwardArgs a{dout.as<float>(), z.as<float>(), tg.as<int32_t>(), lse.as<float>(), out.as<float>() + T,
                               dz.as<float>(), (int64_t)T, (int64_t)V, (int32_t)ignore, (float)scale};
  return RUN("tokenLogprobsEntropyBackward", TokenLogprobsEntropyBackward, a);
}

// adamw(n, lr, beta1, beta2, eps, weightDecay, step, param, grad, m, v)
U AdamW(StreamImpl& s, Reader& r) {
  U n = r.Index("n");
  double lr = r.Number("lr"), b1 = r.Number("beta1"), b2 = r.Number("beta2"), eps = r.Number("eps"), wd = r.Number("weightDecay");
  U step = r.Positive("step");
  Span p = r.Tensor("param", n, F32), g = r.Tensor("grad", n, F32), m = r.Tensor("m", n, F32), v = r.Tensor("v", n, F32);
  r.CheckOutputs({"param", "m", "v"});
  AdamWArgs a{p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), (int64_t)n, (float)lr, (float)b1, (float)b2,
              (float)eps, (float)wd, (int64_t)step};
  return RUN("adamw", AdamW, a);
}

// sample(B, V, temperature, topK, topP, seedLo, seedHi, offsetLo, offsetHi, logits, out)
U Sample(StreamImpl& s, Reader& r) {
  U B = r.Index("B"), V = r.Positive("V");
  double temp = r.Number("temperature");
  U topk = r.Index("topK");
  double topp = r.Number("topP");
  if (!(temp >= 0) || !(topp > 0)) r.Fail("temperature must be >= 0 and topP > 0.");
  U slo = r.Index("seedLo"), shi = r.Index("seedHi"), olo = r.Index("offsetLo"), ohi = r.Index("offsetHi");
  if (slo > 0xffffffffu || shi > 0xffffffffu || olo > 0xffffffffu || ohi > 0xffffffffu) r.Fail("seed and offset words must be uint32.");
  Span z = r.Tensor("logits", Mul({B, V}, "logits"), F32), out = r.Tensor("out", B, I32);
  r.CheckOutputs({"out"});
  SampleArgs a{z.as<float>(), out.as<int32_t>(), (int64_t)B, (int64_t)V, (float)temp, (int64_t)topk, topp,
               (shi << 32) | slo, (ohi << 32) | olo};
  return RUN("sample", Sample, a);
}

#include "model_ops_fused.inc"
#include "model_ops_gdn.inc"
#include "model_ops_multi.inc"
#include "model_ops_decode.inc"

#undef RUN

}  // namespace

const std::vector<OpRow>& ModelOps() {
  static const auto* table = new std::vector<OpRow>{
      {"embedding", Embedding},
      {"embeddingBackward", EmbeddingBackward},
      {"rmsNorm", RmsNorm},
      {"rmsNormBackward", RmsNormBackward},
      {"rope", Rope},
      {"attention", Attention},
      {"attentionBackward", AttentionBackward},
      {"attentionDecode", AttentionDecode},
      {"kvCacheWrite", KvCacheWrite},
      {"swiglu", Swiglu},
      {"swigluBackward", SwigluBackward},
      {"router", Router},
      {"routerBackward", RouterBackward},
      {"moeDispatch", MoeDispatch},
      {"moeGather", MoeGather},
      {"moeGatherBackward", MoeGatherBackward},
      {"moeCombine", MoeCombine},
      {"moeCombineBackward", MoeCombineBackward},
      {"groupedMatmul", GroupedMatmul},
      {"groupedMatmulBackward", GroupedMatmulBackward},
      {"logSoftmax", LogSoftmax},
      {"crossEntropy", CrossEntropy},
      {"crossEntropyBackward", CrossEntropyBackward},
      {"tokenLogprobsEntropy", TokenLogprobsEntropy},
      {"tokenLogprobsEntropyBackward", TokenLogprobsEntropyBackward},
      {"adamw", AdamW},
      {"adamwMulti", AdamWMulti},
      {"sumSquares", SumSquares},
      {"sample", Sample},
      {"gdn", Gdn},
      {"gdnBackward", GdnBackward},
      {"causalConv", CausalConv},
      {"causalConvBackward", CausalConvBackward},
      {"gatedRmsNorm", GatedRmsNorm},
      {"gatedRmsNormBackward", GatedRmsNormBackward},
      {"gdnGating", GdnGating},
      {"gdnGatingBackward", GdnGatingBackward},
      {"qkvNormRope", QkvNormRope},
      {"addRmsNorm", AddRmsNorm},
      {"decodeLayer", DecodeLayer},
  };
  return *table;
}

namespace {

// philox(keyLo, keyHi, c0, c1, c2, c3) -> [4 words]: the RNG itself, for known-answer
// tests; runs synchronously on the calling thread (no device work).
Napi::Value Philox(const Napi::CallbackInfo& info) {
  Reader r(info, "philox", 1, true);
  uint32_t key[2], ctr[4], out[4];
  for (int i = 0; i < 6; ++i) {
    uint64_t w = r.Index("word");
    if (w > 0xffffffffu) r.Fail("words must be uint32 but received " + std::to_string(w) + ".");
    (i < 2 ? key[i] : ctr[i - 2]) = static_cast<uint32_t>(w);
  }
  Philox4x32(key, ctr, out);
  Napi::Array a = Napi::Array::New(info.Env(), 4);
  for (uint32_t i = 0; i < 4; ++i) a.Set(i, Napi::Number::New(info.Env(), out[i]));
  return a;
}

}  // namespace

Napi::Value StreamWrap::ModelOp(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&]() -> Napi::Value {
    Napi::Value n = Arg(info, 0);
    if (!n.IsString()) ThrowInvalidArgument("modelOp: expected the kernel name as the first argument but received " + Describe(n) + ".");
    // The name into a stack buffer (no std::string per op); a name that does not fit is no
    // kernel's, and is read whole only for the message.
    char buf[64];
    size_t len = 0;
    napi_get_value_string_utf8(info.Env(), n, buf, sizeof buf, &len);
    if (len + 1 < sizeof buf && std::strlen(buf) == len) {  // (an embedded NUL is no name either)
      if (std::strcmp(buf, "philox") == 0) return Philox(info);
      for (const OpRow& row : ModelOps()) {
        if (std::strcmp(buf, row.name) != 0) continue;
        Reader r(info, row.name, 1, true);
        BindToStream(r, *impl_);
        return Napi::Number::New(info.Env(), static_cast<double>(row.run(*impl_, r)));
      }
    }
    std::string name = n.As<Napi::String>().Utf8Value();
    ThrowInvalidArgument("modelOp: unknown kernel '" + name + "'.", {Str("op", name)});
  });
}

}  // namespace ascent
