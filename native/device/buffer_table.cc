#include "device/buffer_table.h"

#include <string>

#include "device/buffer.h"
#include "errors.h"

namespace ascent {
namespace {

static_assert(sizeof(void*) == 8, "a buffer handle packs a 32-bit slot index and a 32-bit generation in a pointer");

// Index + 1, so no handle is the null pointer.
void* Pack(uint32_t index, uint32_t generation) {
  return reinterpret_cast<void*>((static_cast<uint64_t>(generation) << 32) | (static_cast<uint64_t>(index) + 1));
}

void Unpack(void* handle, uint64_t* index, uint32_t* generation) {
  const uint64_t v = reinterpret_cast<uint64_t>(handle);
  *index = (v & 0xffffffffULL) - 1;  // wraps to 2^64 - 1 for a zero low half: out of range
  *generation = static_cast<uint32_t>(v >> 32);
}

void Check(napi_env env, napi_status status, const char* what) {
  if (status != napi_ok) {
    // Clears the JS exception a failing call may leave (we throw our own).
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
    ThrowInvalidArgument(std::string("Internal: ") + what + " failed (napi status " + std::to_string(status) + ").");
  }
}

}  // namespace

void BufferTable::Detach() {
  detached_ = true;
  MaybeDelete();
}

void BufferTable::MaybeDelete() {
  if (detached_ && live_ == 0) delete this;
}

napi_value BufferTable::NewHandle(napi_env env, std::shared_ptr<Block> block) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if (slots_.size() >= 0xfffffffeULL) ThrowInvalidArgument("Too many live device buffers in this thread (2^32 - 2).");
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& slot = slots_[index];
  void* handle = Pack(index, slot.generation);
  napi_value external;
  napi_status s = napi_create_external(env, handle, nullptr, nullptr, &external);
  if (s == napi_ok) s = napi_add_finalizer(env, external, handle, &BufferTable::Finalize, this, &slot.finalizer);
  if (s != napi_ok) {
    free_.push_back(index);
    Check(env, s, "creating a buffer handle");
  }
  slot.block = std::move(block);
  ++live_;
  return external;
}

BufferTable::Slot* BufferTable::Live(void* handle) {
  uint64_t index;
  uint32_t generation;
  Unpack(handle, &index, &generation);
  if (index >= slots_.size()) return nullptr;
  Slot& slot = slots_[index];
  return slot.block && slot.generation == generation ? &slot : nullptr;
}

const std::shared_ptr<Block>* BufferTable::Find(void* handle) const {
  Slot* slot = const_cast<BufferTable*>(this)->Live(handle);
  return slot ? &slot->block : nullptr;
}

bool BufferTable::Stale(void* handle, uint64_t* id) const {
  uint64_t index;
  uint32_t generation;
  Unpack(handle, &index, &generation);
  if (index >= slots_.size()) return false;
  const Slot& slot = slots_[index];
  if (generation >= slot.generation) return false;
  *id = generation + 1 == slot.generation ? slot.released_id : 0;
  return true;
}

void BufferTable::Free(napi_env env, Slot& slot, uint32_t index) {
  napi_delete_reference(env, slot.finalizer);
  slot.finalizer = nullptr;
  // A new generation: every handle of the old one now reads as released.
  ++slot.generation;
  slot.released_id = slot.block->id();
  free_.push_back(index);
  --live_;
  // Last: dropping the block may free it (the pool and the registry), which cannot touch us.
  std::shared_ptr<Block> block = std::move(slot.block);
  slot.block.reset();
}

void BufferTable::Release(napi_env env, void* handle) {
  Slot* slot = Live(handle);
  if (slot) Free(env, *slot, static_cast<uint32_t>(slot - slots_.data()));
}

// A handle nobody released was collected: its reference to the block goes.
void BufferTable::Finalize(napi_env env, void* handle, void* table) {
  auto* self = static_cast<BufferTable*>(table);
  Slot* slot = self->Live(handle);
  if (slot) self->Free(env, *slot, static_cast<uint32_t>(slot - self->slots_.data()));
  self->MaybeDelete();
}

}  // namespace ascent
