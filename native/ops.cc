// The one checked enqueue point: every op validates device, bounds and dtype
// synchronously (InvalidArgument, before any side effect), then fills an Op with
// the blocks it touches (kept alive until it ran) and enqueues it.
#include <algorithm>
#include <cstring>

#include "args.h"
#include "device/span.h"
#include "device/stream.h"
#include "env_data.h"
#include "kernels/fast.h"
#include "kernels/reference.h"

namespace ascent {
namespace {

// The enqueue-point view of ArgSpan: buffers must be on the stream's device (no check
// for the explicit peer copy, which passes no stream).
Span StreamSpan(const Napi::CallbackInfo& info, size_t i, const char* name, uint64_t bytes, size_t align,
                const StreamImpl* stream) {
  const int device = stream != nullptr ? stream->device().ordinal : -1;
  return ArgSpan(info, i, name, bytes, align, device, "stream belongs to device " + std::to_string(device), "streamDevice");
}

void CheckNoOverlap(const Span& out, const Span& in, const char* out_name, const char* in_name) {
  if (Overlaps(out, in)) {
    ThrowInvalidArgument(std::string(out_name) + " overlaps " + in_name + "; this op cannot run in place.",
                         {Str("argument", out_name)});
  }
}

void CheckFloat(DType t, const char* op) {
  if (!IsFloat(t)) {
    ThrowInvalidArgument(std::string(op) + " supports fp32, bf16 and fp16 but received " + DTypeName(t) + ".",
                         {Str("op", op), Str("dtype", DTypeName(t))});
  }
}

std::unique_ptr<Op> MakeOp(const char* name, uint64_t token, std::function<void(Op&)> run,
                           std::vector<std::shared_ptr<Block>> keep = {}) {
  auto op = std::make_unique<Op>();
  op->name = name;
  op->token = token;
  op->run = std::move(run);
  op->keep = std::move(keep);
  return op;
}

Napi::Number Seq(Napi::Env env, uint64_t seq) { return Napi::Number::New(env, static_cast<double>(seq)); }

}  // namespace

Napi::Value StreamWrap::Marker(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t token = ArgToken(info, 0);
    return Seq(info.Env(), impl_->Enqueue(MakeOp("synchronize", token, [](Op&) {})));
  });
}

Napi::Value StreamWrap::SleepOp(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    double ms = ArgNumber(info, 0, "ms");
    if (!(ms >= 0)) ThrowInvalidArgument("Expected a non-negative number of milliseconds for sleep().");
    uint64_t token = ArgToken(info, 1);
    StreamImpl* s = impl_.get();
    return Seq(info.Env(), impl_->Enqueue(MakeOp("sleep", token, [s, ms](Op&) { s->Sleep(ms); })));
  });
}

Napi::Value StreamWrap::FailOp(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Napi::Value m = Arg(info, 0);
    if (!m.IsString()) ThrowInvalidArgument("Expected a message string for fail().");
    std::string message = m.As<Napi::String>().Utf8Value();
    uint64_t token = ArgToken(info, 1);
    return Seq(info.Env(), impl_->Enqueue(MakeOp("fail", token, [message](Op&) {
      throw AscentException(ErrorInfo{kStreamError, message, {}});
    })));
  });
}

Napi::Value StreamWrap::RecordEvent(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    std::shared_ptr<EventState> ev = EventWrap::FromValue(Arg(info, 0), "event");
    uint64_t token = ArgToken(info, 1);
    int sd = impl_->device().ordinal;
    if (ev->device != sd) {
      ThrowInvalidArgument("Expected an event of device " + std::to_string(sd) + " but the event belongs to device " +
                               std::to_string(ev->device) + " (stream belongs to device " + std::to_string(sd) +
                               "). HINT: create the event with the stream's device.newEvent().",
                           {Num("expectedDevice", sd), Num("actualDevice", ev->device)});
    }
    if (impl_->stopped()) impl_->Enqueue(nullptr);  // throws the destroyed-stream error
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      gen = ++ev->recorded;
    }
    return Seq(info.Env(), impl_->Enqueue(MakeOp("recordEvent", token, [ev, gen](Op&) { ev->Complete(gen); })));
  });
}

Napi::Value StreamWrap::WaitEventOp(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    std::shared_ptr<EventState> ev = EventWrap::FromValue(Arg(info, 0), "event");
    uint64_t token = ArgToken(info, 1);
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      gen = ev->recorded;
    }
    StreamImpl* s = impl_.get();
    return Seq(info.Env(), impl_->Enqueue(MakeOp("waitEvent", token, [s, ev, gen](Op&) {
      if (gen != 0) s->WaitEvent(ev, gen);
    })));
  });
}

Napi::Value StreamWrap::CopyH2D(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    Napi::Value src = Arg(info, 2);
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
      ThrowInvalidArgument("Expected a TypedArray or ArrayBuffer as the host source of copyH2D.");
    }
    Span dst = StreamSpan(info, 0, "dst", len, 1, impl_.get());
    uint64_t token = ArgToken(info, 3);
    // Snapshot at enqueue: the caller may reuse its host memory at once.
    auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + len);
    return Seq(info.Env(), impl_->Enqueue(MakeOp("copyH2D", token, [dst, bytes](Op&) {
      if (!bytes->empty()) std::memcpy(dst.ptr(), bytes->data(), bytes->size());
    }, {dst.block})));
  });
}

Napi::Value StreamWrap::CopyD2H(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t n = ArgIndex(info, 2, "nbytes");
    Span src = StreamSpan(info, 0, "src", n, 1, impl_.get());
    uint64_t token = ArgToken(info, 3);
    uint64_t seq = impl_->Enqueue(MakeOp("copyD2H", token, [src](Op& op) {
      op.result.assign(src.ptr(), src.ptr() + src.bytes);
      op.has_result = true;
    }, {src.block}));
    impl_->device().pool.AddHostSync();
    return Seq(info.Env(), seq);
  });
}

Napi::Value StreamWrap::CopyD2D(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t n = ArgIndex(info, 4, "nbytes");
    Span dst = StreamSpan(info, 0, "dst", n, 1, impl_.get());
    Span src = StreamSpan(info, 2, "src", n, 1, impl_.get());
    uint64_t token = ArgToken(info, 5);
    return Seq(info.Env(), impl_->Enqueue(MakeOp("copyD2D", token, [dst, src](Op&) {
      if (src.bytes) std::memmove(dst.ptr(), src.ptr(), src.bytes);
    }, {dst.block, src.block})));
  });
}

// The only op that may touch two devices. The stream must belong to one of them.
Napi::Value StreamWrap::CopyPeer(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t n = ArgIndex(info, 4, "nbytes");
    Span dst = StreamSpan(info, 0, "dst", n, 1, nullptr);
    Span src = StreamSpan(info, 2, "src", n, 1, nullptr);
    int sd = impl_->device().ordinal;
    if (dst.block->ordinal() != sd && src.block->ordinal() != sd) {
      ThrowInvalidArgument("copyPeer from device " + std::to_string(src.block->ordinal()) + " to device " +
                               std::to_string(dst.block->ordinal()) + " was enqueued on a stream of device " +
                               std::to_string(sd) + ". HINT: use a stream of the source or destination device.",
                           {Num("streamDevice", sd), Num("srcDevice", src.block->ordinal()),
                            Num("dstDevice", dst.block->ordinal())});
    }
    uint64_t token = ArgToken(info, 5);
    return Seq(info.Env(), impl_->Enqueue(MakeOp("copyPeer", token, [dst, src](Op&) {
      if (src.bytes) std::memmove(dst.ptr(), src.ptr(), src.bytes);
    }, {dst.block, src.block})));
  });
}

Napi::Value StreamWrap::Fill(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t count = ArgIndex(info, 2, "count");
    DType t = ArgDType(info, 3, "dtype");
    double value = ArgNumber(info, 4, "value");
    bool reference = ArgUseReference(info, 5);
    uint64_t token = ArgToken(info, 6);
    Span dst = StreamSpan(info, 0, "dst", CheckedMul(count, DTypeSize(t), "fill size"), DTypeSize(t), impl_.get());
    return Seq(info.Env(), impl_->Enqueue(MakeOp("fill", token, [=](Op&) {
      (reference ? ref::Fill : fast::Fill)(dst.ptr(), t, count, value);
    }, {dst.block})));
  });
}

Napi::Value StreamWrap::Arange(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t count = ArgIndex(info, 2, "count");
    DType t = ArgDType(info, 3, "dtype");
    double start = ArgNumber(info, 4, "start");
    double step = ArgNumber(info, 5, "step");
    bool reference = ArgUseReference(info, 6);
    uint64_t token = ArgToken(info, 7);
    Span dst = StreamSpan(info, 0, "dst", CheckedMul(count, DTypeSize(t), "arange size"), DTypeSize(t), impl_.get());
    return Seq(info.Env(), impl_->Enqueue(MakeOp("arange", token, [=](Op&) {
      (reference ? ref::Arange : fast::Arange)(dst.ptr(), t, count, start, step);
    }, {dst.block})));
  });
}

// cast(dst, dstOffset, dstDtype, src, srcOffset, srcDtype, count, impl, token)
Napi::Value StreamWrap::Cast(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    DType dt = ArgDType(info, 2, "dstDtype");
    DType st = ArgDType(info, 5, "srcDtype");
    uint64_t count = ArgIndex(info, 6, "count");
    bool reference = ArgUseReference(info, 7);
    uint64_t token = ArgToken(info, 8);
    Span dst = StreamSpan(info, 0, "dst", CheckedMul(count, DTypeSize(dt), "cast size"), DTypeSize(dt), impl_.get());
    Span src = StreamSpan(info, 3, "src", CheckedMul(count, DTypeSize(st), "cast size"), DTypeSize(st), impl_.get());
    if (dt != st) CheckNoOverlap(dst, src, "dst", "src");
    return Seq(info.Env(), impl_->Enqueue(MakeOp("cast", token, [=](Op&) {
      (reference ? ref::Cast : fast::Cast)(dst.ptr(), dt, src.ptr(), st, count);
    }, {dst.block, src.block})));
  });
}

// binary(op, dtype, out, outOffset, a, aOffset, b, bOffset, count, impl, token)
Napi::Value StreamWrap::Binary(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t opcode = ArgIndex(info, 0, "op");
    if (opcode > 1) ThrowInvalidArgument("Unknown binary op code.");
    auto bop = static_cast<BinaryOp>(opcode);
    DType t = ArgDType(info, 1, "dtype");
    uint64_t count = ArgIndex(info, 8, "count");
    bool reference = ArgUseReference(info, 9);
    uint64_t token = ArgToken(info, 10);
    uint64_t bytes = CheckedMul(count, DTypeSize(t), "binary size");
    Span out = StreamSpan(info, 2, "out", bytes, DTypeSize(t), impl_.get());
    Span a = StreamSpan(info, 4, "a", bytes, DTypeSize(t), impl_.get());
    Span b = StreamSpan(info, 6, "b", bytes, DTypeSize(t), impl_.get());
    const char* name = bop == BinaryOp::kAdd ? "add" : "mul";
    return Seq(info.Env(), impl_->Enqueue(MakeOp(name, token, [=](Op&) {
      (reference ? ref::Binary : fast::Binary)(bop, t, out.ptr(), a.ptr(), b.ptr(), count);
    }, {out.block, a.block, b.block})));
  });
}

// scale(dtype, out, outOffset, x, xOffset, count, alpha, impl, token)
Napi::Value StreamWrap::Scale(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    DType t = ArgDType(info, 0, "dtype");
    CheckFloat(t, "scale");
    uint64_t count = ArgIndex(info, 5, "count");
    float alpha = static_cast<float>(ArgNumber(info, 6, "alpha"));
    bool reference = ArgUseReference(info, 7);
    uint64_t token = ArgToken(info, 8);
    uint64_t bytes = CheckedMul(count, DTypeSize(t), "scale size");
    Span out = StreamSpan(info, 1, "out", bytes, DTypeSize(t), impl_.get());
    Span x = StreamSpan(info, 3, "x", bytes, DTypeSize(t), impl_.get());
    return Seq(info.Env(), impl_->Enqueue(MakeOp("scale", token, [=](Op&) {
      (reference ? ref::Scale : fast::Scale)(t, out.ptr(), x.ptr(), count, alpha);
    }, {out.block, x.block})));
  });
}

// axpy(dtype, y, yOffset, x, xOffset, count, alpha, impl, token)
Napi::Value StreamWrap::Axpy(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    DType t = ArgDType(info, 0, "dtype");
    CheckFloat(t, "axpy");
    uint64_t count = ArgIndex(info, 5, "count");
    float alpha = static_cast<float>(ArgNumber(info, 6, "alpha"));
    bool reference = ArgUseReference(info, 7);
    uint64_t token = ArgToken(info, 8);
    uint64_t bytes = CheckedMul(count, DTypeSize(t), "axpy size");
    Span y = StreamSpan(info, 1, "y", bytes, DTypeSize(t), impl_.get());
    Span x = StreamSpan(info, 3, "x", bytes, DTypeSize(t), impl_.get());
    return Seq(info.Env(), impl_->Enqueue(MakeOp("axpy", token, [=](Op&) {
      (reference ? ref::Axpy : fast::Axpy)(t, y.ptr(), x.ptr(), count, alpha);
    }, {y.block, x.block})));
  });
}

// permute(elemSize, dst, dstOffset, src, srcOffset, shape[], srcStrides[], impl, token)
Napi::Value StreamWrap::Permute(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    uint64_t elem = ArgIndex(info, 0, "elemSize");
    if (elem != 1 && elem != 2 && elem != 4 && elem != 8) ThrowInvalidArgument("elemSize must be 1, 2, 4 or 8.");
    Napi::Value sv = Arg(info, 5), tv = Arg(info, 6);
    if (!sv.IsArray() || !tv.IsArray()) ThrowInvalidArgument("Expected arrays for shape and srcStrides.");
    Napi::Array sa = sv.As<Napi::Array>(), ta = tv.As<Napi::Array>();
    if (sa.Length() != ta.Length() || sa.Length() > 16) ThrowInvalidArgument("shape and srcStrides must have the same rank (at most 16).");
    PermuteArgs p;
    p.elem_size = elem;
    uint64_t numel = 1, max_src = 0;
    for (uint32_t d = 0; d < sa.Length(); ++d) {
      Napi::Value s = sa.Get(d), st = ta.Get(d);
      if (!s.IsNumber() || !st.IsNumber()) ThrowInvalidArgument("shape and srcStrides must hold numbers.");
      double sd = s.As<Napi::Number>().DoubleValue(), td = st.As<Napi::Number>().DoubleValue();
      if (!(sd >= 0) || !(td >= 0) || std::floor(sd) != sd || std::floor(td) != td || sd > 9e15 || td > 9e15) {
        ThrowInvalidArgument("shape and srcStrides must be non-negative integers.");
      }
      p.shape.push_back(static_cast<int64_t>(sd));
      p.src_strides.push_back(static_cast<int64_t>(td));
      numel = CheckedMul(numel, static_cast<uint64_t>(sd), "permute size");
    }
    if (numel > 0) {
      for (size_t d = 0; d < p.shape.size(); ++d) {
        max_src += CheckedMul(static_cast<uint64_t>(p.shape[d] - 1), static_cast<uint64_t>(p.src_strides[d]), "permute extent");
      }
    }
    bool reference = ArgUseReference(info, 7);
    uint64_t token = ArgToken(info, 8);
    Span dst = StreamSpan(info, 1, "dst", CheckedMul(numel, elem, "permute size"), elem, impl_.get());
    Span src = StreamSpan(info, 3, "src", numel == 0 ? 0 : CheckedMul(max_src + 1, elem, "permute extent"), elem, impl_.get());
    CheckNoOverlap(dst, src, "dst", "src");
    return Seq(info.Env(), impl_->Enqueue(MakeOp("permute", token, [dst, src, p, reference](Op&) mutable {
      p.dst = dst.ptr();
      p.src = src.ptr();
      (reference ? ref::Permute : fast::Permute)(p);
    }, {dst.block, src.block})));
  });
}

// matmul(inDtype, outDtype, a, aOffset, b, bOffset, c, cOffset, batch, m, n, k, transA, transB, impl, token)
Napi::Value StreamWrap::Matmul(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    DType in = ArgDType(info, 0, "inDtype");
    DType out = ArgDType(info, 1, "outDtype");
    if (in != DType::kF32 && in != DType::kBF16) ThrowInvalidArgument(std::string("matmul inputs must be fp32 or bf16, not ") + DTypeName(in) + ".");
    if (out != DType::kF32 && out != DType::kBF16) ThrowInvalidArgument(std::string("matmul output must be fp32 or bf16, not ") + DTypeName(out) + ".");
    uint64_t batch = ArgIndex(info, 8, "batch"), m = ArgIndex(info, 9, "m"), n = ArgIndex(info, 10, "n"),
             k = ArgIndex(info, 11, "k");
    bool ta = ArgBool(info, 12, "transA"), tb = ArgBool(info, 13, "transB");
    bool reference = ArgUseReference(info, 14);
    uint64_t token = ArgToken(info, 15);
    size_t is = DTypeSize(in), os = DTypeSize(out);
    Span a = StreamSpan(info, 2, "a", CheckedMul(CheckedMul(CheckedMul(batch, m, "A"), k, "A"), is, "A"), is, impl_.get());
    Span b = StreamSpan(info, 4, "b", CheckedMul(CheckedMul(CheckedMul(batch, k, "B"), n, "B"), is, "B"), is, impl_.get());
    Span c = StreamSpan(info, 6, "c", CheckedMul(CheckedMul(CheckedMul(batch, m, "C"), n, "C"), os, "C"), os, impl_.get());
    CheckNoOverlap(c, a, "c", "a");
    CheckNoOverlap(c, b, "c", "b");
    return Seq(info.Env(), impl_->Enqueue(MakeOp("matmul", token, [=](Op&) {
      MatmulArgs g{in, out, a.ptr(), b.ptr(), c.ptr(), static_cast<int64_t>(batch), static_cast<int64_t>(m),
                   static_cast<int64_t>(n), static_cast<int64_t>(k), ta, tb};
      (reference ? ref::Matmul : fast::Matmul)(g);
    }, {a.block, b.block, c.block})));
  });
}

}  // namespace ascent
