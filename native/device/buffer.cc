#include "device/buffer.h"

#include <string>

#include "env_data.h"
#include "errors.h"
#include "type_tags.h"

namespace ascent {

std::shared_ptr<Block> Block::Allocate(Device& device, uint64_t bytes) {
  uint64_t offset = device.pool.Allocate(bytes);
  uint64_t id = Registry::Get().NextId();
  std::shared_ptr<Block> block(new Block(id, device, offset, bytes));
  Registry::Get().AddBlock(id, block);
  return block;
}

Block::~Block() {
  Registry::Get().RemoveBlock(id_);
  device_.pool.Free(offset_);
}

Napi::Function BufferWrap::Define(Napi::Env env) {
  return DefineClass(env, "Buffer",
                     {InstanceMethod<&BufferWrap::Release>("release"),
                      InstanceAccessor<&BufferWrap::GetId>("id"),
                      InstanceAccessor<&BufferWrap::GetDevice>("device"),
                      InstanceAccessor<&BufferWrap::GetSize>("size"),
                      InstanceAccessor<&BufferWrap::GetReleased>("released")});
}

Napi::Object BufferWrap::NewInstance(Napi::Env env, std::shared_ptr<Block> block) {
  Napi::Object obj = EnvData::Get(env)->buffer_ctor.New({});
  BufferWrap* wrap = Napi::ObjectWrap<BufferWrap>::Unwrap(obj);
  wrap->id_ = block->id();
  wrap->device_ = block->ordinal();
  wrap->size_ = block->size();
  wrap->block_ = std::move(block);
  return obj;
}

std::shared_ptr<Block> BufferWrap::FromValue(Napi::Value value, const char* what) {
  if (!HasTypeTag(value, kBufferTag)) {
    ThrowInvalidArgument(std::string("Expected a device Buffer for ") + what + ".", {Str("argument", what)});
  }
  BufferWrap* wrap = Napi::ObjectWrap<BufferWrap>::Unwrap(value.As<Napi::Object>());
  if (!wrap->block_) {
    ThrowInvalidArgument(std::string("Buffer ") + std::to_string(wrap->id_) + " passed as " + what +
                             " was already released. HINT: do not use a tensor after release().",
                         {Str("argument", what), Num("buffer", static_cast<double>(wrap->id_))});
  }
  return wrap->block_;
}

// Only NewInstance creates usable buffers; `new Buffer()` from JS gives a released one (tagged
// too, so passing it reads as "already released", as before).
BufferWrap::BufferWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<BufferWrap>(info) {
  info.This().As<Napi::Object>().TypeTag(&kBufferTag);
}

Napi::Value BufferWrap::Release(const Napi::CallbackInfo& info) {
  block_.reset();
  return info.Env().Undefined();
}

Napi::Value BufferWrap::GetId(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(id_));
}

Napi::Value BufferWrap::GetDevice(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), device_); }

Napi::Value BufferWrap::GetSize(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(size_));
}

Napi::Value BufferWrap::GetReleased(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !block_);
}

}  // namespace ascent
