// The base ops of a Stream, one row each in BaseOps(): every handler validates
// device, bounds and dtype synchronously through its Reader (InvalidArgument,
// before any side effect), then enqueues one Op keeping the blocks it touches alive
// until it ran. Arguments are (buffer, byteOffset) pairs first and sizes after, so
// handlers read the sizes first (Reader::At) and the buffers with their extents.
#include <algorithm>
#include <cstring>

#include "args.h"
#include "device/span.h"
#include "device/stream.h"
#include "env_data.h"
#include "kernels/fast.h"
#include "kernels/reference.h"
#include "op_table.h"

namespace ascent {

void BindToStream(Reader& r, const StreamImpl& s) {
  const int device = s.device().ordinal;
  r.SetDevice(device, "stream belongs to device", "streamDevice");
}

uint64_t EnqueueQueuedOp(StreamImpl& s, const Reader& r, const std::string& name, uint64_t token, std::function<void(Op&)> run,
                         bool may_inline) {
  auto op = std::make_unique<Op>();
  op->name = name;
  op->token = token;
  op->run = std::move(run);
  // Enqueue tries inline once more: the stream may have gone idle since EnqueueOp tried.
  op->may_inline = may_inline && r.SpanBytes() <= kInlineMaxBytes;
  op->keep = r.Blocks();
  return s.Enqueue(std::move(op));
}

namespace {

using U = uint64_t;

void CheckFloat(Reader& r, DType t) {
  if (!IsFloat(t)) {
    r.Fail(r.op() + " supports fp32, bf16 and fp16 but received " + DTypeName(t) + ".", {Str("dtype", DTypeName(t))});
  }
}

// marker(token)
U Marker(StreamImpl& s, Reader& r) { return EnqueueOp(s, r, "synchronize", r.Token(), [](Op&) {}); }

// sleep(ms, token)
U SleepOp(StreamImpl& s, Reader& r) {
  double ms = r.Number("ms");
  if (!(ms >= 0)) r.Fail("Expected a non-negative number of milliseconds for sleep().");
  StreamImpl* sp = &s;
  return EnqueueOp(s, r, "sleep", r.Token(), [sp, ms](Op&) { sp->Sleep(ms); }, false);
}

// fail(message, token): a test hook whose op throws on the stream thread.
U FailOp(StreamImpl& s, Reader& r) {
  std::string message = r.String("message");
  return EnqueueOp(s, r, "fail", r.Token(), [message](Op&) { throw AscentException(ErrorInfo{kStreamError, message, {}}); });
}

// recordEvent(event, token)
U RecordEvent(StreamImpl& s, Reader& r) {
  std::shared_ptr<EventState> ev = EventWrap::FromValue(r.Value(), "event");
  uint64_t token = r.Token();
  int sd = s.device().ordinal;
  if (ev->device != sd) {
    ThrowInvalidArgument("Expected an event of device " + std::to_string(sd) + " but the event belongs to device " +
                             std::to_string(ev->device) + " (stream belongs to device " + std::to_string(sd) +
                             "). HINT: create the event with the stream's device.newEvent().",
                         {Num("expectedDevice", sd), Num("actualDevice", ev->device)});
  }
  if (s.stopped()) s.Enqueue(nullptr);  // throws the destroyed-stream error before the event moves on
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ++ev->recorded;
  }
  auto op = std::make_unique<Op>();
  op->name = "recordEvent";
  op->token = token;
  op->may_inline = true;
  op->run = [ev, gen](Op&) { ev->Complete(gen); };
  // Never run (its stream failed earlier or was destroyed): the streams waiting on this
  // generation fail with that error instead of waiting for a record that will not come.
  op->on_skip = [ev, gen](const ErrorInfo& cause) { ev->Fail(gen, cause); };
  return s.Enqueue(std::move(op));
}

// waitEvent(event, token)
U WaitEventOp(StreamImpl& s, Reader& r) {
  std::shared_ptr<EventState> ev = EventWrap::FromValue(r.Value(), "event");
  uint64_t token = r.Token();
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ev->recorded;
  }
  StreamImpl* sp = &s;
  return EnqueueOp(
      s, r, "waitEvent", token,
      [sp, ev, gen](Op&) {
        if (gen == 0) return;
        sp->WaitEvent(ev, gen);
        if (std::optional<ErrorInfo> f = ev->FailureFor(gen)) {
          throw AscentException(ErrorInfo{kStreamError,
                                          "waitEvent: event " + std::to_string(ev->id) + " was recorded on a stream that failed before it got to the record, so this stream cannot go on: " +
                                              f->message,
                                          {Num("event", static_cast<double>(ev->id)), Str("causeCode", f->code), Str("causeMessage", f->message)}});
        }
      },
      false);
}

// copyH2D(dst, dstOffset, src: TypedArray | ArrayBuffer, token)
U CopyH2D(StreamImpl& s, Reader& r) {
  Napi::Value src = r.At(2).Value();
  const uint8_t* data = nullptr;
  size_t len = 0;
  if (src.IsTypedArray()) {
    Napi::TypedArray ta = src.As<Napi::TypedArray>();
    data = static_cast<const uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
    len = ta.ByteLength();
  } else if (src.IsArrayBuffer()) {
    Napi::ArrayBuffer ab = src.As<Napi::ArrayBuffer>();
    data = static_cast<const uint8_t*>(ab.Data());
    len = ab.ByteLength();
  } else {
    r.Fail("Expected a TypedArray or ArrayBuffer as the host source of copyH2D but received " + Describe(src) + ".",
           {Str("argument", "src")});
  }
  Span dst = r.At(0).Buffer("dst", len, 1);
  uint64_t token = r.At(3).Token();
  // Snapshot at enqueue: the caller may reuse its host memory at once.
  auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + len);
  return EnqueueOp(s, r, "copyH2D", token, [dst, bytes](Op&) {
    if (!bytes->empty()) std::memcpy(dst.ptr(), bytes->data(), bytes->size());
  });
}

// copyD2H(src, srcOffset, nbytes, token): the bytes come back with the completion.
U CopyD2H(StreamImpl& s, Reader& r) {
  uint64_t n = r.At(2).Index("nbytes");
  Span src = r.At(0).Buffer("src", n, 1);
  uint64_t token = r.At(3).Token();
  uint64_t seq = EnqueueOp(s, r, "copyD2H", token, [src](Op& op) {
    op.result.assign(src.ptr(), src.ptr() + src.bytes);
    op.has_result = true;
  });
  s.device().pool.AddHostSync();
  return seq;
}

// copyD2D(dst, dstOffset, src, srcOffset, nbytes, token)
U CopyD2D(StreamImpl& s, Reader& r) {
  uint64_t n = r.At(4).Index("nbytes");
  Span dst = r.At(0).Buffer("dst", n, 1), src = r.Buffer("src", n, 1);
  return EnqueueOp(s, r, "copyD2D", r.At(5).Token(), [dst, src](Op&) {
    if (src.bytes) std::memmove(dst.ptr(), src.ptr(), src.bytes);
  });
}

// copyPeer(dst, dstOffset, src, srcOffset, nbytes, token): the only op that may
// touch two devices. The stream must belong to one of them.
U CopyPeer(StreamImpl& s, Reader& r) {
  uint64_t n = r.At(4).Index("nbytes");
  r.SetDevice(-1, "stream belongs to device", "streamDevice");
  Span dst = r.At(0).Buffer("dst", n, 1), src = r.Buffer("src", n, 1);
  int sd = s.device().ordinal;
  if (dst.block->ordinal() != sd && src.block->ordinal() != sd) {
    ThrowInvalidArgument("copyPeer from device " + std::to_string(src.block->ordinal()) + " to device " +
                             std::to_string(dst.block->ordinal()) + " was enqueued on a stream of device " +
                             std::to_string(sd) + ". HINT: use a stream of the source or destination device.",
                         {Num("streamDevice", sd), Num("srcDevice", src.block->ordinal()),
                          Num("dstDevice", dst.block->ordinal())});
  }
  return EnqueueOp(s, r, "copyPeer", r.At(5).Token(), [dst, src](Op&) {
    if (src.bytes) std::memmove(dst.ptr(), src.ptr(), src.bytes);
  });
}

// fill(dst, dstOffset, count, dtype, value, impl, token)
U Fill(StreamImpl& s, Reader& r) {
  uint64_t count = r.At(2).Index("count");
  DType t = r.Dtype("dtype");
  double value = r.Number("value");
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span dst = r.At(0).Tensor("dst", count, t);
  return EnqueueOp(s, r, "fill", token, [=](Op&) { (reference ? ref::Fill : fast::Fill)(dst.ptr(), t, count, value); });
}

// arange(dst, dstOffset, count, dtype, start, step, impl, token)
U Arange(StreamImpl& s, Reader& r) {
  uint64_t count = r.At(2).Index("count");
  DType t = r.Dtype("dtype");
  double start = r.Number("start"), step = r.Number("step");
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span dst = r.At(0).Tensor("dst", count, t);
  return EnqueueOp(s, r, "arange", token, [=](Op&) { (reference ? ref::Arange : fast::Arange)(dst.ptr(), t, count, start, step); });
}

// cast(dst, dstOffset, dstDtype, src, srcOffset, srcDtype, count, impl, token)
U Cast(StreamImpl& s, Reader& r) {
  DType dt = r.At(2).Dtype("dstDtype"), st = r.At(5).Dtype("srcDtype");
  uint64_t count = r.Index("count");
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span dst = r.At(0).Tensor("dst", count, dt), src = r.At(3).Tensor("src", count, st);
  if (dt != st) r.CheckNoOverlap(dst, src, "dst", "src");
  return EnqueueOp(s, r, "cast", token, [=](Op&) { (reference ? ref::Cast : fast::Cast)(dst.ptr(), dt, src.ptr(), st, count); });
}

// binary(op, dtype, out, outOffset, a, aOffset, b, bOffset, count, impl, token)
U Binary(StreamImpl& s, Reader& r) {
  uint64_t opcode = r.Index("op");
  if (opcode > 1) r.Fail("Unknown binary op code " + std::to_string(opcode) + "; expected 0 (add) or 1 (mul).");
  auto bop = static_cast<BinaryOp>(opcode);
  DType t = r.Dtype("dtype");
  uint64_t count = r.At(8).Index("count");
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span out = r.At(2).Tensor("out", count, t), a = r.Tensor("a", count, t), b = r.Tensor("b", count, t);
  return EnqueueOp(s, r, bop == BinaryOp::kAdd ? "add" : "mul", token, [=](Op&) {
    (reference ? ref::Binary : fast::Binary)(bop, t, out.ptr(), a.ptr(), b.ptr(), count);
  });
}

// scale(dtype, out, outOffset, x, xOffset, count, alpha, impl, token)
U Scale(StreamImpl& s, Reader& r) {
  DType t = r.Dtype("dtype");
  CheckFloat(r, t);
  uint64_t count = r.At(5).Index("count");
  float alpha = static_cast<float>(r.Number("alpha"));
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span out = r.At(1).Tensor("out", count, t), x = r.Tensor("x", count, t);
  return EnqueueOp(s, r, "scale", token, [=](Op&) { (reference ? ref::Scale : fast::Scale)(t, out.ptr(), x.ptr(), count, alpha); });
}

// axpy(dtype, y, yOffset, x, xOffset, count, alpha, impl, token)
U Axpy(StreamImpl& s, Reader& r) {
  DType t = r.Dtype("dtype");
  CheckFloat(r, t);
  uint64_t count = r.At(5).Index("count");
  float alpha = static_cast<float>(r.Number("alpha"));
  bool reference = r.Impl();
  uint64_t token = r.Token();
  Span y = r.At(1).Tensor("y", count, t), x = r.Tensor("x", count, t);
  return EnqueueOp(s, r, "axpy", token, [=](Op&) { (reference ? ref::Axpy : fast::Axpy)(t, y.ptr(), x.ptr(), count, alpha); });
}

// permute(elemSize, dst, dstOffset, src, srcOffset, shape[], srcStrides[], impl, token)
U Permute(StreamImpl& s, Reader& r) {
  uint64_t elem = r.Index("elemSize");
  if (elem != 1 && elem != 2 && elem != 4 && elem != 8) r.Fail("elemSize must be 1, 2, 4 or 8 but is " + std::to_string(elem) + ".");
  std::vector<uint64_t> shape = r.At(5).Counts("shape", -1, 16);
  std::vector<uint64_t> strides = r.Counts("srcStrides", static_cast<long>(shape.size()));
  bool reference = r.Impl();
  uint64_t token = r.Token();
  PermuteArgs p;
  p.elem_size = elem;
  uint64_t numel = 1, max_src = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    p.shape.push_back(static_cast<int64_t>(shape[d]));
    p.src_strides.push_back(static_cast<int64_t>(strides[d]));
    numel = CheckedMul(numel, shape[d], "permute size");
  }
  if (numel > 0) {
    for (size_t d = 0; d < shape.size(); ++d) max_src += CheckedMul(shape[d] - 1, strides[d], "permute extent");
  }
  Span dst = r.At(1).Buffer("dst", CheckedMul(numel, elem, "permute size"), elem);
  Span src = r.Buffer("src", numel == 0 ? 0 : CheckedMul(max_src + 1, elem, "permute extent"), elem);
  r.CheckNoOverlap(dst, src, "dst", "src");
  return EnqueueOp(s, r, "permute", token, [dst, src, p, reference](Op&) mutable {
    p.dst = dst.ptr();
    p.src = src.ptr();
    (reference ? ref::Permute : fast::Permute)(p);
  });
}

DType MatmulDtype(Reader& r, const char* name, const char* role) {
  DType t = r.Dtype(name);
  if (t != DType::kF32 && t != DType::kBF16) r.Fail(std::string("matmul ") + role + " must be fp32 or bf16, not " + DTypeName(t) + ".");
  return t;
}

// matmul(inDtype, outDtype, a, aOffset, b, bOffset, c, cOffset, batch, m, n, k, transA, transB, impl, token)
// With c = null the op makes C itself, a new block on the stream's device, and returns its buffer
// handle (as alloc() does) instead of the seq: what TS matmul() does for every call, where a
// separate alloc() was a second native call, a second handle check and an overlap test per op.
U Matmul(StreamImpl& s, Reader& r) {
  DType in = MatmulDtype(r, "inDtype", "inputs"), out = MatmulDtype(r, "outDtype", "output");
  uint64_t batch = r.At(8).Index("batch"), m = r.Index("m"), n = r.Index("n"), k = r.Index("k");
  bool ta = r.Bool("transA"), tb = r.Bool("transB");
  bool reference = r.Impl();
  uint64_t token = r.Token();
  auto numel = [](uint64_t b, uint64_t x, uint64_t y, const char* what) { return CheckedMul(CheckedMul(b, x, what), y, what); };
  Span a = r.At(2).Tensor("a", numel(batch, m, k, "A"), in), b = r.Tensor("b", numel(batch, k, n, "B"), in);
  const uint64_t c_numel = numel(batch, m, n, "C");
  Span c = r.Tensor("c", c_numel, out, /*optional=*/true);
  const bool make_c = !c.block;
  if (make_c) {
    // Last, after every check: a call that throws has allocated nothing.
    c = r.Made("c", Block::Allocate(s.device(), CheckedMul(c_numel, DTypeSize(out), "C")));
  } else {
    r.CheckNoOverlap(c, a, "c", "a");
    r.CheckNoOverlap(c, b, "c", "b");
  }
  // The closure holds the arguments as they are, not the spans: the blocks stay alive through the
  // op (the reader's spans while it runs inline, the op's keep list while it waits), so copying
  // three shared_ptrs into it and releasing them again is work per op that keeps nothing alive.
  const MatmulArgs g{in, out, a.ptr(), b.ptr(), c.ptr(), static_cast<int64_t>(batch), static_cast<int64_t>(m),
                     static_cast<int64_t>(n), static_cast<int64_t>(k), ta, tb};
  const U seq = EnqueueOp(s, r, "matmul", token, [g, reference](Op&) { (reference ? ref::Matmul : fast::Matmul)(g); });
  if (make_c) r.SetResult(NewBufferHandle(r.Env(), c.block));
  return seq;
}

}  // namespace

const std::vector<OpRow>& BaseOps() {
  static const auto* table = new std::vector<OpRow>{
      {"marker", Marker}, {"sleep", SleepOp}, {"fail", FailOp}, {"recordEvent", RecordEvent},
      {"waitEvent", WaitEventOp}, {"copyH2D", CopyH2D}, {"copyD2H", CopyD2H}, {"copyD2D", CopyD2D},
      {"copyRanges", CopyRangesOp}, {"copyPeer", CopyPeer}, {"fill", Fill}, {"arange", Arange}, {"cast", Cast}, {"binary", Binary},
      {"scale", Scale}, {"axpy", Axpy}, {"permute", Permute}, {"matmul", Matmul}, {"fingerprint", FingerprintOp},
  };
  return *table;
}

// One JS method per row (Define passes the row as the method's data).
napi_value StreamWrap::RunOp(napi_env env, napi_callback_info info) {
  // More than any base op takes (matmul: 16); extra arguments are ignored, as before.
  constexpr size_t kMaxArgs = 20;
  napi_value argv[kMaxArgs];
  size_t argc = kMaxArgs;
  napi_value self;
  void* data = nullptr;
  void* wrap = nullptr;
  if (napi_get_cb_info(env, info, &argc, argv, &self, &data) != napi_ok) return nullptr;
  if (napi_unwrap(env, self, &wrap) != napi_ok || wrap == nullptr) {
    // What node-addon-api's method wrapper throws for a call on another object.
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
    napi_throw_error(env, nullptr, "Invalid argument");
    return nullptr;
  }
  auto* stream = static_cast<StreamWrap*>(wrap);
  const auto* row = static_cast<const OpRow*>(data);
  try {
    return Guard(Napi::Env(env), [&]() -> napi_value {
      Reader r(env, argv, argc < kMaxArgs ? argc : kMaxArgs, row->name);
      BindToStream(r, *stream->impl_);
      const uint64_t seq = row->run(*stream->impl_, r);
      return r.result() != nullptr ? r.result() : static_cast<napi_value>(Napi::Number::New(env, static_cast<double>(seq)));
    });
  } catch (const Napi::Error& e) {
    e.ThrowAsJavaScriptException();
  } catch (const std::exception& e) {
    napi_throw_error(env, nullptr, e.what());
  }
  return nullptr;
}

}  // namespace ascent
