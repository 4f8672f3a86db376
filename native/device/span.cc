#include "device/span.h"

#include "args.h"
#include "errors.h"

namespace ascent {

uint64_t CheckedMul(uint64_t a, uint64_t b, const char* what) {
  if (a != 0 && b > UINT64_MAX / a) ThrowInvalidArgument(std::string("Size overflow computing ") + what + ".");
  return a * b;
}

Span ArgSpan(const Napi::Value& buffer, const Napi::Value& byte_offset, const char* name, uint64_t bytes, size_t align, int device,
             const char* owner, const char* owner_key, const char* op, bool prefixed) {
  std::shared_ptr<Block> block = BlockFromValue(buffer, name);
  uint64_t offset = IndexValue(byte_offset, name);
  // "Expected" starts a sentence; after an "op: " prefix it continues one.
  const bool first = !prefixed;
  auto prefix = [&] { return prefixed ? std::string(op) + ": " : std::string(); };
  if (device >= 0 && block->ordinal() != device) {
    ThrowInvalidArgument(prefix() + (first ? "Expected" : "expected") + " buffers on device " + std::to_string(device) + " but " + name +
                             " is on device " + std::to_string(block->ordinal()) + " (" + owner + " " + std::to_string(device) +
                             "). HINT: use copyPeer() to move it first.",
                         {Str("argument", name), Num("expectedDevice", device), Num("actualDevice", block->ordinal()),
                          Num(owner_key, device)});
  }
  if (align > 1 && offset % align != 0) {
    ThrowInvalidArgument(prefix() + (first ? "Byte" : "byte") + " offset " + std::to_string(offset) + " of " + name +
                             " is not a multiple of the element size " + std::to_string(align) + ".",
                         {Str("argument", name), Num("byteOffset", static_cast<double>(offset))});
  }
  if (offset > block->size() || bytes > block->size() - offset) {
    ThrowInvalidArgument(prefix() + (first ? "Out of bounds" : "out of bounds") + ": " + name + " needs bytes [" + std::to_string(offset) +
                             ", " + std::to_string(offset + bytes) + ") but buffer " + std::to_string(block->id()) + " has " +
                             std::to_string(block->size()) + " bytes.",
                         {Str("argument", name), Num("byteOffset", static_cast<double>(offset)),
                          Num("bytes", static_cast<double>(bytes)), Num("bufferSize", static_cast<double>(block->size()))});
  }
  return Span{std::move(block), offset, bytes};
}

}  // namespace ascent
