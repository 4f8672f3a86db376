// Enqueue point of the fingerprint kernel (kernels/fingerprint.h):
// stream.fingerprint(src, srcOffset, shape[], localStrides[], globalStrides[],
//                    globalOffset, limit, period, start, len, out, outOffset, token)
// src is fp32 (read as bits), out one int64 slot that the kernel adds to. TS
// (src/sync/fingerprint.ts) validates first with precise messages; this is the net.
#include <cmath>

#include "args.h"
#include "device/span.h"
#include "device/stream.h"
#include "kernels/fingerprint.h"

namespace ascent {
namespace {

std::vector<int64_t> IntArray(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsArray()) ThrowInvalidArgument(std::string("fingerprint: expected an array for ") + name + ".");
  Napi::Array a = v.As<Napi::Array>();
  if (a.Length() > 16) ThrowInvalidArgument(std::string("fingerprint: ") + name + " has more than 16 dims.");
  std::vector<int64_t> out;
  for (uint32_t d = 0; d < a.Length(); ++d) {
    Napi::Value x = a.Get(d);
    double n = x.IsNumber() ? x.As<Napi::Number>().DoubleValue() : -1;
    if (!(n >= 0) || n > 9e15 || std::floor(n) != n) {
      ThrowInvalidArgument(std::string("fingerprint: ") + name + " must hold non-negative integers.");
    }
    out.push_back(static_cast<int64_t>(n));
  }
  return out;
}

}  // namespace

Napi::Value StreamWrap::Fingerprint(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    FingerprintArgs a;
    a.shape = IntArray(info, 2, "shape");
    a.local_strides = IntArray(info, 3, "localStrides");
    a.global_strides = IntArray(info, 4, "globalStrides");
    if (a.local_strides.size() != a.shape.size() || a.global_strides.size() != a.shape.size()) {
      ThrowInvalidArgument("fingerprint: shape, localStrides and globalStrides must have the same rank.");
    }
    a.global_offset = static_cast<int64_t>(ArgIndex(info, 5, "globalOffset"));
    a.limit = ArgIndex(info, 6, "limit");
    a.filter_period = ArgIndex(info, 7, "period");
    a.filter_start = ArgIndex(info, 8, "start");
    a.filter_len = ArgIndex(info, 9, "len");
    uint64_t token = ArgToken(info, 12);
    uint64_t extent = 0;
    bool empty = false;
    for (size_t d = 0; d < a.shape.size(); ++d) {
      if (a.shape[d] == 0) empty = true;
      else extent += CheckedMul(static_cast<uint64_t>(a.shape[d] - 1), static_cast<uint64_t>(a.local_strides[d]), "fingerprint extent");
    }
    const int dev = impl_->device().ordinal;
    const std::string owner = "stream belongs to device " + std::to_string(dev);
    Span src = ArgSpan(info, 0, "src", empty ? 0 : CheckedMul(extent + 1, 4, "fingerprint extent"), 4, dev, owner, "streamDevice", "fingerprint: ");
    Span out = ArgSpan(info, 10, "out", 8, 8, dev, owner, "streamDevice", "fingerprint: ");
    auto op = std::make_unique<Op>();
    op->name = "fingerprint";
    op->token = token;
    op->keep = {src.block, out.block};
    op->run = [a, src, out](Op&) mutable {
      a.src = src.as<const uint32_t>();
      a.out = out.as<uint64_t>();
      ascent::Fingerprint(a);
    };
    return Napi::Number::New(info.Env(), static_cast<double>(impl_->Enqueue(std::move(op))));
  });
}

}  // namespace ascent
