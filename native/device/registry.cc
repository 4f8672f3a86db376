#include "device/registry.h"

#include <string>

#include "errors.h"

namespace ascent {

Registry& Registry::Get() {
  static Registry* registry = new Registry();  // leaked: see header
  return *registry;
}

void Registry::CheckOrdinal(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) {
    ThrowInvalidArgument("Expected a device ordinal in [0, " + std::to_string(kMaxDevices) + ") but received " +
                             std::to_string(ordinal) + ".",
                         {Num("device", ordinal)});
  }
}

Device& Registry::GetOrCreate(int ordinal, uint64_t default_capacity) {
  CheckOrdinal(ordinal);
  std::lock_guard<std::mutex> lock(mu_);
  if (devices_[ordinal] == nullptr) {
    uint64_t host = HostMemoryBytes();
    devices_[ordinal] = new Device(ordinal, default_capacity < host ? default_capacity : host);
  }
  return *devices_[ordinal];
}

Device& Registry::Configure(int ordinal, uint64_t capacity) {
  CheckOrdinal(ordinal);
  uint64_t host = HostMemoryBytes();
  if (capacity > host) {
    ThrowInvalidArgument("Device " + std::to_string(ordinal) + " capacity " + FormatBytes(capacity) +
                             " exceeds host memory (" + FormatBytes(host) + "). HINT: choose at most the host RAM.",
                         {Num("device", ordinal), Num("requested", static_cast<double>(capacity)),
                          Num("hostMemory", static_cast<double>(host))});
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (devices_[ordinal] == nullptr) {
    devices_[ordinal] = new Device(ordinal, capacity);
  } else {
    devices_[ordinal]->pool.Reconfigure(capacity);
  }
  return *devices_[ordinal];
}

Device& Registry::Existing(int ordinal) {
  CheckOrdinal(ordinal);
  std::lock_guard<std::mutex> lock(mu_);
  if (devices_[ordinal] == nullptr) {
    ThrowInvalidArgument("Device " + std::to_string(ordinal) + " was not initialised. HINT: call Device.get(" +
                             std::to_string(ordinal) + ") first.",
                         {Num("device", ordinal)});
  }
  return *devices_[ordinal];
}

uint64_t Registry::NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

void Registry::AddBlock(uint64_t id, const std::shared_ptr<Block>& block) {
  std::lock_guard<std::mutex> lock(mu_);
  block_nodes_.Insert(blocks_, id, block);
}

void Registry::RemoveBlock(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(id);
  if (it != blocks_.end()) block_nodes_.Erase(blocks_, it);
}

std::shared_ptr<Block> Registry::FindBlock(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(id);
  return it == blocks_.end() ? nullptr : it->second.lock();
}

}  // namespace ascent
