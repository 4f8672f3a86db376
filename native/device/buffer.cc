#include "device/buffer.h"

#include <string>

#include "device/buffer_table.h"
#include "device/recycling_allocator.h"
#include "env_data.h"
#include "errors.h"

namespace ascent {

std::shared_ptr<Block> Block::Allocate(Device& device, uint64_t bytes) {
  uint64_t offset = device.pool.Allocate(bytes);
  uint64_t id = Registry::Get().NextId();
  // One allocation for the block and its reference count, reused from this thread's freed
  // blocks when there is one (device/recycling_allocator.h).
  std::shared_ptr<Block> block;
  try {
    block = std::allocate_shared<Block>(RecyclingAllocator<Block>(), Key{}, id, device, offset, bytes);
  } catch (...) {
    device.pool.Free(offset);
    throw;
  }
  Registry::Get().AddBlock(id, block);
  return block;
}

Block::~Block() {
  Registry::Get().RemoveBlock(id_);
  device_.pool.Free(offset_);
}

namespace {

[[noreturn]] void ThrowNotABuffer(const char* what) {
  ThrowInvalidArgument(std::string("Expected a device Buffer for ") + what + ".", {Str("argument", what)});
}

[[noreturn]] void ThrowReleased(const char* what, double id) {
  ThrowInvalidArgument(std::string("Buffer ") + std::to_string(static_cast<uint64_t>(id)) + " passed as " + what +
                           " was already released. HINT: do not use a tensor after release().",
                       {Str("argument", what), Num("buffer", id)});
}

// The id a released buffer shows in its error (its slot no longer knows it); 0 when the object
// has no numeric id. Error path only.
double IdOf(napi_env env, napi_value obj) {
  napi_value v;
  double id = 0;
  if (napi_get_named_property(env, obj, "id", &v) != napi_ok || napi_get_value_double(env, v, &id) != napi_ok) {
    napi_value ignored;
    napi_get_and_clear_last_exception(env, &ignored);
    return 0;
  }
  return id;
}

}  // namespace

std::shared_ptr<Block> BlockFromValue(Napi::Value value, const char* what) {
  napi_env env = value.Env();
  EnvData* data = EnvData::Get(value.Env());
  napi_value obj = value;
  napi_valuetype type;
  if (data->buffer_key.IsEmpty() || napi_typeof(env, obj, &type) != napi_ok) ThrowNotABuffer(what);
  void* ptr;
  if (type == napi_external) {
    // The handle itself (what the TS ops pass): no property lookup, which cost ~1k instructions
    // per buffer argument (a symbol-keyed get through the generic V8 path).
    if (napi_get_value_external(env, obj, &ptr) != napi_ok) ThrowNotABuffer(what);
    if (const std::shared_ptr<Block>* block = data->buffers->Find(ptr)) return *block;
    uint64_t id = 0;
    if (!data->buffers->Stale(ptr, &id)) ThrowNotABuffer(what);  // another addon's External
    ThrowReleased(what, static_cast<double>(id));
  }
  if (type != napi_object) ThrowNotABuffer(what);
  napi_value key;
  napi_value handle;
  if (napi_get_reference_value(env, data->buffer_key, &key) != napi_ok || napi_get_property(env, obj, key, &handle) != napi_ok) {
    napi_value ignored;  // a throwing getter or proxy: not ours
    napi_get_and_clear_last_exception(env, &ignored);
    ThrowNotABuffer(what);
  }
  if (napi_typeof(env, handle, &type) != napi_ok || type != napi_external || napi_get_value_external(env, handle, &ptr) != napi_ok) {
    ThrowNotABuffer(what);
  }
  if (const std::shared_ptr<Block>* block = data->buffers->Find(ptr)) return *block;
  ThrowReleased(what, IdOf(env, obj));
}

Napi::Value NewBufferHandle(Napi::Env env, std::shared_ptr<Block> block) {
  EnvData* data = EnvData::Get(env);
  if (data->buffer_info == nullptr) ThrowInvalidArgument("initBuffers() must be called before the first buffer is made.");
  data->buffer_info[0] = static_cast<double>(block->id());
  data->buffer_info[1] = block->ordinal();
  data->buffer_info[2] = static_cast<double>(block->size());
  return Napi::Value(env, data->buffers->NewHandle(env, std::move(block)));
}

}  // namespace ascent
