// Enqueue point of copyRanges, a row of the base op table (op_table.h): a list of
// device-to-device copies run as ONE stream op (one enqueue, one hand-off to the stream
// thread, one trace event) where JS would otherwise issue one copyD2D per range:
//
//   stream.copyRanges(buffers: Buffer[], ranges: Float64Array, token)
//
// `ranges` holds 5 numbers per range: (dstBuffer, dstByteOffset, srcBuffer, srcByteOffset,
// nbytes), the buffers as indices into `buffers` (all on the stream's device). Semantics:
//   - the ranges run in list order, each a memcpy, so a range reading bytes an earlier
//     range wrote sees the new bytes: exactly one copyD2D per range, in order;
//   - a range whose src and dst overlap (same buffer, intersecting byte ranges) is
//     rejected: a gather/scatter never needs one, so it is an offset bug (copyD2D, a
//     memmove, stays the op for shifting bytes within a buffer);
//   - zero-length ranges are allowed (their offsets must still lie in their buffers).
// Every range is checked before anything is enqueued; a bad one is InvalidArgument naming
// its index. TS (src/runtime/device/copy-ranges.ts) checks first in element units.
#include <cstring>

#include "args.h"
#include "comm/copy.h"
#include "device/span.h"
#include "device/stream.h"
#include "op_table.h"

namespace ascent {

namespace {

struct Range {
  uint32_t dst, src;
  uint64_t dst_off, src_off, bytes;
};

constexpr size_t kFields = 5;
constexpr double kMaxSafeInteger = 9007199254740991.0;

bool IsIndexValue(double d) { return d >= 0 && d <= kMaxSafeInteger && static_cast<double>(static_cast<uint64_t>(d)) == d; }

}  // namespace

uint64_t CopyRangesOp(StreamImpl& s, Reader& r) {
  const std::string hint = " HINT: pass copyRanges's arguments in the order and types src/runtime/native.ts lists.";
  const int device = s.device().ordinal;
  Napi::Value bv = r.Value();
  if (!bv.IsArray()) r.Fail("Expected an array of device Buffers for buffers but received " + Describe(bv) + "." + hint, {Str("argument", "buffers")});
  Napi::Array arr = bv.As<Napi::Array>();
  std::vector<std::shared_ptr<Block>> blocks(arr.Length());
  for (uint32_t q = 0; q < arr.Length(); ++q) {
    blocks[q] = BlockFromValue(arr.Get(q), "buffers");
    if (blocks[q]->ordinal() != device) {
      r.Fail("buffers[" + std::to_string(q) + "] is on device " + std::to_string(blocks[q]->ordinal()) + " but the stream belongs to device " +
                 std::to_string(device) + ". HINT: use copyPeer() to move it first.",
             {Str("argument", "buffers"), Num("buffer", q), Num("actualDevice", blocks[q]->ordinal()), Num("streamDevice", device)});
    }
  }
  Napi::Value rv = r.Value();
  if (!rv.IsTypedArray() || rv.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) {
    r.Fail("Expected a Float64Array of (dstBuffer, dstByteOffset, srcBuffer, srcByteOffset, nbytes) quintuples for ranges but received " +
               Describe(rv) + "." + hint,
           {Str("argument", "ranges")});
  }
  Napi::Float64Array fa = rv.As<Napi::Float64Array>();
  if (fa.ElementLength() % kFields != 0) {
    r.Fail("ranges must hold 5 numbers per range but has " + std::to_string(fa.ElementLength()) + "." + hint, {Str("argument", "ranges")});
  }
  const uint64_t token = r.Token();
  const size_t n = fa.ElementLength() / kFields;
  const double* f = fa.Data();
  auto ranges = std::make_shared<std::vector<Range>>(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const double* v = f + i * kFields;
    const std::string at = "range " + std::to_string(i);
    for (size_t k = 0; k < kFields; ++k) {
      if (!IsIndexValue(v[k])) {
        static const char* kNames[kFields] = {"dstBuffer", "dstByteOffset", "srcBuffer", "srcByteOffset", "nbytes"};
        r.Fail(at + ": " + kNames[k] + " must be a non-negative integer but is " + Describe(Napi::Number::New(r.Env(), v[k])) + "." + hint,
               {Str("argument", "ranges"), Num("range", static_cast<double>(i))});
      }
    }
    Range g{0, 0, static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[3]), static_cast<uint64_t>(v[4])};
    for (int side = 0; side < 2; ++side) {
      const double idx = v[side * 2];
      const char* what = side == 0 ? "dst" : "src";
      if (idx >= blocks.size()) {
        r.Fail(at + ": " + what + "Buffer " + std::to_string(static_cast<uint64_t>(idx)) + " is not an index of buffers, which has " + std::to_string(blocks.size()) + "." + hint,
               {Str("argument", "ranges"), Num("range", static_cast<double>(i))});
      }
      const uint32_t b = static_cast<uint32_t>(idx);
      const uint64_t off = side == 0 ? g.dst_off : g.src_off;
      const uint64_t size = blocks[b]->size();
      if (off > size || g.bytes > size - off) {
        r.Fail(at + " is out of bounds: its " + what + " needs bytes [" + std::to_string(off) + ", " + std::to_string(off + g.bytes) +
                   ") but buffer " + std::to_string(blocks[b]->id()) + " has " + std::to_string(size) + " bytes.",
               {Str("argument", "ranges"), Num("range", static_cast<double>(i)), Num("byteOffset", static_cast<double>(off)),
                Num("bytes", static_cast<double>(g.bytes)), Num("bufferSize", static_cast<double>(size))});
      }
      (side == 0 ? g.dst : g.src) = b;
    }
    if (blocks[g.dst] == blocks[g.src] && g.bytes && g.dst_off < g.src_off + g.bytes && g.src_off < g.dst_off + g.bytes) {
      r.Fail(at + ": its src bytes [" + std::to_string(g.src_off) + ", " + std::to_string(g.src_off + g.bytes) + ") and dst bytes [" +
                 std::to_string(g.dst_off) + ", " + std::to_string(g.dst_off + g.bytes) +
                 ") overlap in one buffer. HINT: a range must not copy onto itself; use copy() (a memmove) to shift bytes.",
             {Str("argument", "ranges"), Num("range", static_cast<double>(i))});
    }
    total += g.bytes;
    (*ranges)[i] = g;
  }
  auto op = std::make_unique<Op>();
  op->name = "copyRanges";
  op->token = token;
  // Ranges of kStreamingBytes or more get non-temporal stores (comm/copy.h), as the collectives'
  // large copies do: a weight sync's gathered tensors copied into an engine's parameters are far
  // larger than the caches and not read again soon; skipping the read-for-ownership of every
  // destination line made the 514 MB model's fsdp2 sync ~24% faster. A thread sees its own
  // streamed stores, so a later range reading them is in order; the fence publishes them
  // before the op completes.
  op->run = [ranges, blocks](Op&) {
    bool streamed = false;
    for (const Range& g : *ranges) {
      if (g.bytes >= comm::kStreamingBytes) {
        comm::StreamCopy(blocks[g.dst]->data() + g.dst_off, blocks[g.src]->data() + g.src_off, g.bytes);
        streamed = true;
      } else if (g.bytes) {
        std::memcpy(blocks[g.dst]->data() + g.dst_off, blocks[g.src]->data() + g.src_off, g.bytes);
      }
    }
    if (streamed) comm::StreamFence();
  };
  // Every buffer stays alive until the op ran (the lambda holds them too; keep is what the
  // stream's bookkeeping expects). Inline when the bytes moved are small, as for copyD2D.
  op->keep = blocks;
  op->may_inline = 2 * total <= kInlineMaxBytes;
  op->profile_args = {{"ranges", static_cast<double>(n)}, {"bytes", static_cast<double>(total)}};
  return s.Enqueue(std::move(op));
}

}  // namespace ascent
