// Device memory blocks and their JS wrapper. A Block is owned through shared_ptr:
// the JS Buffer holds one reference, every enqueued op that touches it holds
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
 public:
  static std::shared_ptr<Block> Allocate(Device& device, uint64_t bytes);
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  uint64_t id() const { return id_; }
  Device& device() const { return device_; }
  int ordinal() const { return device_.ordinal; }
  uint64_t size() const { return size_; }
  uint8_t* data() const { return device_.pool.base() + offset_; }

 private:
  Block(uint64_t id, Device& device, uint64_t offset, uint64_t size)
      : id_(id), device_(device), offset_(offset), size_(size) {}

  const uint64_t id_;
  Device& device_;
  const uint64_t offset_;
  const uint64_t size_;  // as requested; the pool block may be larger
};

class BufferWrap : public Napi::ObjectWrap<BufferWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  static Napi::Object NewInstance(Napi::Env env, std::shared_ptr<Block> block);
  // The live block behind a JS Buffer argument; InvalidArgument when `value` is not
  // a Buffer or was released.
  static std::shared_ptr<Block> FromValue(Napi::Value value, const char* what);

  explicit BufferWrap(const Napi::CallbackInfo& info);

 private:
  Napi::Value Release(const Napi::CallbackInfo& info);
  Napi::Value GetId(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);
  Napi::Value GetSize(const Napi::CallbackInfo& info);
  Napi::Value GetReleased(const Napi::CallbackInfo& info);

  std::shared_ptr<Block> block_;
  uint64_t id_ = 0;
  int device_ = -1;
  uint64_t size_ = 0;
};

}  // namespace ascent
