// This env's references to device blocks, one slot per JS buffer (src/runtime/device/buffer.ts).
//
// A JS buffer is a plain JS object holding an opaque handle: a napi External whose value
// names a slot (index and generation), not a pointer. Creating one is a V8 External plus a
// weak finalizer reference; checking it is a bounds check and a generation compare, so a
// stale handle (its buffer released, its slot reused) reads as released and an External of
// another addon can never be dereferenced. The ObjectWrap this replaces cost a JS
// construct call and two private properties (wrap, type tag) per buffer, a native accessor
// call per liveness check, and a finalizer for every buffer, released or not: its tagged
// object was never collectable by a scavenge. Here release() deletes the finalizer
// reference, so a released buffer's objects are ordinary garbage; only a buffer nobody
// released reaches its finalizer, which then drops the block.
//
// Only this env's JS thread touches its table (napi calls and finalizers run there), so
// there is no lock. Handles never cross threads: buffers travel between threads as block
// ids (device/registry.h).
#pragma once

#include <napi.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ascent {

class Block;

class BufferTable {
 public:
  // Owned by EnvData; see Detach.
  static BufferTable* New() { return new BufferTable(); }
  // EnvData is going away. A finalizer reference can outlive it during env teardown (the
  // order Node finalizes references and instance data in is not ours to rely on), so the
  // table frees itself once it is detached and holds no finalizer reference.
  void Detach();

  // A new handle (an External) holding one reference to `block`.
  napi_value NewHandle(napi_env env, std::shared_ptr<Block> block);
  // The block behind `handle` (an External's value), or null when the handle was released,
  // collected or is not one of this table's.
  const std::shared_ptr<Block>* Find(void* handle) const;
  // A stale handle of this table (its slot was released since): true, with the id of the block
  // it named when that is still known (the slot's last release), else 0. False for anything
  // else (a live handle, a foreign External). Error path only.
  bool Stale(void* handle, uint64_t* id) const;
  // Drops the handle's reference and cancels its finalizer; a no-op for a stale handle, so
  // release is idempotent.
  void Release(napi_env env, void* handle);

  BufferTable(const BufferTable&) = delete;
  BufferTable& operator=(const BufferTable&) = delete;

 private:
  struct Slot {
    std::shared_ptr<Block> block;  // null: free
    napi_ref finalizer = nullptr;
    uint32_t generation = 0;
    uint64_t released_id = 0;  // the id of the block generation - 1 held (Stale's message)
  };

  BufferTable() = default;
  static void Finalize(napi_env env, void* handle, void* table);
  Slot* Live(void* handle);
  void Free(napi_env env, Slot& slot, uint32_t index);
  void MaybeDelete();

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  uint64_t live_ = 0;  // slots holding a finalizer reference
  bool detached_ = false;
};

}  // namespace ascent
