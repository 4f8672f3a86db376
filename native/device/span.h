// A checked view [offset, offset + bytes) of a device block, as every enqueue point
// (device ops, model kernels, collectives) reads it from JS arguments. One checker
// for all of them, so the checks and their messages cannot drift apart.
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "device/buffer.h"

namespace ascent {

struct Span {
  std::shared_ptr<Block> block;  // null: an optional tensor that was not given
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint8_t* ptr() const { return block ? block->data() + offset : nullptr; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(ptr());
  }
};

// The one overlap test of every enqueue point: same block, both non-empty, byte
// ranges intersect.
inline bool Overlaps(const Span& a, const Span& b) {
  return a.block && a.block == b.block && a.bytes && b.bytes && a.offset < b.offset + b.bytes &&
         b.offset < a.offset + a.bytes;
}

// a * b, or InvalidArgument naming `what` on overflow.
uint64_t CheckedMul(uint64_t a, uint64_t b, const char* what);

// Reads the (buffer, byteOffset) argument pair; checks that the block is on
// `device` (skipped when device < 0, e.g. an explicit peer copy), that the offset is a multiple of `align` and that the range lies inside
// the block. With `prefixed`, messages start with "op: " (e.g. "attention: "); they name
// whose device it is (`owner` and the device, e.g. "stream belongs to device" 2); the
// error's details carry the owner's device under `owner_key` (e.g. "streamDevice").
// Strings are built only when the check fails: this runs for every buffer of every op.
Span ArgSpan(const Napi::Value& buffer, const Napi::Value& byte_offset, const char* name, uint64_t bytes, size_t align, int device,
             const char* owner, const char* owner_key, const char* op = "", bool prefixed = false);

}  // namespace ascent
