// Device memory blocks and how JS arguments name them. A Block is owned through shared_ptr:
// each JS buffer holds one reference (device/buffer_table.h), every enqueued op that touches it holds
// another until the op has run, so memory returns to the pool only when the last
// user is done. Blocks have process-unique ids; any thread can import a live block
// by id (handles cross threads as numbers, never the data).
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>

#include "device/registry.h"

namespace ascent {

class Block {
  struct Key {};  // only Allocate makes blocks (the constructor is public for make_shared)

 public:
  static std::shared_ptr<Block> Allocate(Device& device, uint64_t bytes);
  Block(Key, uint64_t id, Device& device, uint64_t offset, uint64_t size)
      : id_(id), device_(device), offset_(offset), size_(size) {}
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  uint64_t id() const { return id_; }
  Device& device() const { return device_; }
  int ordinal() const { return device_.ordinal; }
  uint64_t size() const { return size_; }
  uint8_t* data() const { return device_.pool.base() + offset_; }

 private:
  const uint64_t id_;
  Device& device_;
  const uint64_t offset_;
  const uint64_t size_;  // as requested; the pool block may be larger
};

// The live block behind a JS buffer argument (src/runtime/device/buffer.ts): the buffer's
// handle itself, or the buffer object, whose handle property (its key is the JS symbol given
// to initBuffers) is read first; the handle is looked up in this env's BufferTable.
// InvalidArgument when `value` is not a device buffer (a primitive, a plain or forged object,
// another native wrapper, another addon's External) or was released.
std::shared_ptr<Block> BlockFromValue(Napi::Value value, const char* what);

// alloc / importBuffer: the handle of a new JS buffer holding a reference to `block`. Writes
// the block's id, device and size to the env's buffer-info array, where the JS constructor
// reads them: one native call per buffer, no object of properties to build and read.
Napi::Value NewBufferHandle(Napi::Env env, std::shared_ptr<Block> block);

}  // namespace ascent
