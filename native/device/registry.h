// The one process-global device registry, shared by the main thread and every
// worker: device memory is process-global on purpose (a worker's rank imports the
// buffers another rank exported), so it is not part of the per-env EnvData. The
// addon is loaded in the main thread before any worker, so this state lives as
// long as the process. It is leaked on purpose (never destroyed): worker threads
// and stream threads may outlive static destruction at process exit.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "device/node_cache.h"

#include "device/memory_pool.h"

namespace ascent {

class Block;

struct Device {
  Device(int ordinal_, uint64_t capacity) : ordinal(ordinal_), pool(ordinal_, capacity) {}
  const int ordinal;
  MemoryPool pool;
};

class Registry {
 public:
  static constexpr int kMaxDevices = 1024;

  static Registry& Get();

  // Creates the device on first use with min(default_capacity, host RAM).
  Device& GetOrCreate(int ordinal, uint64_t default_capacity);
  // Explicit capacity: must not exceed host RAM; a device with live allocations
  // keeps its capacity (InvalidArgument when it differs).
  Device& Configure(int ordinal, uint64_t capacity);
  // InvalidArgument when the device was never created (Device.get / configure).
  Device& Existing(int ordinal);

  uint64_t NextId();
  void AddBlock(uint64_t id, const std::shared_ptr<Block>& block);
  void RemoveBlock(uint64_t id);
  // Null when the block was freed (every reference released).
  std::shared_ptr<Block> FindBlock(uint64_t id);

 private:
  Registry() = default;
  static void CheckOrdinal(int ordinal);

  std::mutex mu_;
  Device* devices_[kMaxDevices] = {};
  std::unordered_map<uint64_t, std::weak_ptr<Block>> blocks_;
  NodeCache<std::unordered_map<uint64_t, std::weak_ptr<Block>>> block_nodes_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace ascent
