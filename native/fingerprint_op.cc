// Enqueue point of the fingerprint kernel (kernels/fingerprint.h), a row of the base
// op table (op_table.h):
// stream.fingerprint(src, srcOffset, shape[], localStrides[], globalStrides[],
//                    globalOffset, limit, period, start, len, out, outOffset, token)
// src is fp32 (read as bits), out one int64 slot that the kernel adds to. TS
// (src/sync/fingerprint.ts) validates first with precise messages; this is the net.
#include "args.h"
#include "device/span.h"
#include "device/stream.h"
#include "kernels/fingerprint.h"
#include "op_table.h"

namespace ascent {

uint64_t FingerprintOp(StreamImpl& s, Reader& r) {
  FingerprintArgs a;
  std::vector<uint64_t> shape = r.At(2).Counts("shape", -1, 16);
  std::vector<uint64_t> local = r.Counts("localStrides", static_cast<long>(shape.size()));
  std::vector<uint64_t> global = r.Counts("globalStrides", static_cast<long>(shape.size()));
  a.shape.assign(shape.begin(), shape.end());
  a.local_strides.assign(local.begin(), local.end());
  a.global_strides.assign(global.begin(), global.end());
  a.global_offset = static_cast<int64_t>(r.Index("globalOffset"));
  a.limit = r.Index("limit");
  a.filter_period = r.Index("period");
  a.filter_start = r.Index("start");
  a.filter_len = r.Index("len");
  uint64_t token = r.At(12).Token();
  uint64_t extent = 0;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) empty = true;
    else extent += CheckedMul(shape[d] - 1, local[d], "fingerprint extent");
  }
  Span src = r.At(0).Buffer("src", empty ? 0 : CheckedMul(extent + 1, 4, "fingerprint extent"), 4);
  Span out = r.At(10).Buffer("out", 8, 8);
  return EnqueueOp(s, r, "fingerprint", token, [a, src, out](Op&) mutable {
    a.src = src.as<const uint32_t>();
    a.out = out.as<uint64_t>();
    Fingerprint(a);
  });
}

}  // namespace ascent
