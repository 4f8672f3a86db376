#include "device/memory_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "errors.h"

namespace ascent {

uint64_t HostMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

MemoryPool::MemoryPool(int ordinal, uint64_t capacity) : ordinal_(ordinal) { Map(capacity); }

MemoryPool::~MemoryPool() { Unmap(); }

void MemoryPool::Map(uint64_t capacity) {
  capacity = capacity / kAlignment * kAlignment;
  if (capacity == 0) {
    ThrowInvalidArgument("Device " + std::to_string(ordinal_) + " capacity must be at least " +
                             std::to_string(kAlignment) + " bytes.",
                         {Num("device", ordinal_), Num("capacity", static_cast<double>(capacity))});
  }
  // Each device's pool starts `skew` bytes into its mapping: the mappings themselves land
  // a power of two apart, so without it the same offset on 16 devices (the inputs of a
  // reduction) maps to the same L1 set and the lines evict each other. 4160 = 4096 + 64
  // moves each device one cache line further along the sets.
  const uint64_t skew = static_cast<uint64_t>(ordinal_ % 64) * 4160;
  void* p = mmap(nullptr, capacity + skew, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    ThrowInvalidArgument("Device " + std::to_string(ordinal_) + ": could not reserve " + FormatBytes(capacity) +
                             " of address space (" + std::strerror(errno) +
                             "). HINT: lower ASCENT_DEVICE_MEMORY or the configured capacity.",
                         {Num("device", ordinal_), Num("capacity", static_cast<double>(capacity))});
  }
  // Transparent huge pages for the pool: a first touch of a fresh large block (a sync's
  // staging, a model's weights) then faults 2 MiB at a time instead of 4 KiB, which cut
  // the kernel's page-fault overhead that dominated weight-sync time. Advice only: where
  // THP is off the call fails or does nothing and 4 KiB pages are used as before.
  (void)madvise(p, capacity + skew, MADV_HUGEPAGE);
  base_ = static_cast<uint8_t*>(p) + skew;
  skew_ = skew;
  capacity_ = capacity;
  free_by_offset_.clear();
  free_by_size_.clear();
  unreleased_.clear();
  unreleased_bytes_ = 0;
  InsertFree(0, capacity);
}

void MemoryPool::Unmap() {
  if (base_ != nullptr) munmap(base_ - skew_, capacity_ + skew_);
  base_ = nullptr;
}

void MemoryPool::InsertFree(uint64_t offset, uint64_t size) {
  offset_nodes_.Insert(free_by_offset_, offset, size);
  size_nodes_.Insert(free_by_size_, size, offset);
}

void MemoryPool::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  auto range = free_by_size_.equal_range(it->second);
  for (auto s = range.first; s != range.second; ++s) {
    if (s->second == it->first) {
      size_nodes_.Erase(free_by_size_, s);
      break;
    }
  }
  offset_nodes_.Erase(free_by_offset_, it);
}

uint64_t MemoryPool::LargestFreeLocked() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

uint64_t MemoryPool::Allocate(uint64_t bytes) {
  uint64_t need = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mu_);
  auto fit = need < bytes ? free_by_size_.end() : free_by_size_.lower_bound(need);  // need < bytes: overflow
  if (fit == free_by_size_.end()) {
    uint64_t largest = LargestFreeLocked();
    std::string msg = "Device " + std::to_string(ordinal_) + " out of memory: tried to allocate " +
                      FormatBytes(bytes) + "; " + FormatBytes(allocated_) + " of " + FormatBytes(capacity_) +
                      " in use, largest free block " + FormatBytes(largest) + ". HINT: ";
    msg += need <= capacity_ - allocated_
               ? "enough memory is free but it is fragmented; release long-lived buffers first or allocate "
                 "large buffers early."
               : "release tensors you no longer need (tensor.release()), use smaller batches, or raise "
                 "ASCENT_DEVICE_MEMORY / configureDevice(" + std::to_string(ordinal_) + ", { capacityBytes }).";
    throw AscentException(ErrorInfo{kDeviceOOM, msg,
                                    {Num("device", ordinal_), Num("requested", static_cast<double>(bytes)),
                                     Num("allocated", static_cast<double>(allocated_)),
                                     Num("capacity", static_cast<double>(capacity_)),
                                     Num("largestFreeBlock", static_cast<double>(largest))}});
  }
  uint64_t offset = fit->second, size = fit->first;
  EraseFree(free_by_offset_.find(offset));
  if (size > need) InsertFree(offset + need, size - need);
  ForgetResidentLocked(offset, need);
  used_nodes_.Insert(used_, offset, need);
  allocated_ += need;
  if (allocated_ > peak_) peak_ = allocated_;
  if (allocated_ > cache_peak_) cache_peak_ = allocated_;
  ++total_allocs_;
  return offset;
}

void MemoryPool::Free(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  uint64_t size = u->second;
  used_nodes_.Erase(used_, u);
  allocated_ -= size;
  uint64_t start = offset, end = offset + size;
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == end) {
    end += next->second;
    EraseFree(next);
  }
  auto after = free_by_offset_.lower_bound(offset);
  if (after != free_by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == start) {
      start = prev->first;
      EraseFree(prev);
    }
  }
  InsertFree(start, end - start);
  if (size < kReleaseThreshold) return;
  const uint64_t budget = std::max(kResidentFreeBudget, cache_peak_);
  if (unreleased_bytes_ + size <= budget) {
    unreleased_.emplace(offset, size);
    unreleased_bytes_ += size;
    return;
  }
  // Past the budget: this block's pages go back, and the cached ones too (the cache is then
  // colder than the work).
  ReleaseCachedLocked();
  ReleaseFreePagesLocked(offset, size);
}

uint64_t MemoryPool::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  return ReleaseCachedLocked();
}

uint64_t MemoryPool::ReleaseCachedLocked() {
  const uint64_t bytes = unreleased_bytes_;
  for (const auto& [o, s] : unreleased_) ReleaseFreePagesLocked(o, s);
  unreleased_.clear();
  unreleased_bytes_ = 0;
  return bytes;
}

void MemoryPool::ForgetResidentLocked(uint64_t offset, uint64_t size) {
  if (unreleased_.empty()) return;
  const uint64_t end = offset + size;
  auto it = unreleased_.upper_bound(offset);
  if (it != unreleased_.begin()) --it;
  while (it != unreleased_.end() && it->first < end) {
    const uint64_t o = it->first, e = o + it->second;
    if (e <= offset) {
      ++it;
      continue;
    }
    unreleased_bytes_ -= it->second;
    it = unreleased_.erase(it);
    if (o < offset) {
      unreleased_.emplace(o, offset - o);
      unreleased_bytes_ += offset - o;
    }
    if (e > end) {
      it = unreleased_.emplace(end, e - end).first;
      unreleased_bytes_ += e - end;
      ++it;
    }
  }
}

void MemoryPool::ReleaseFreePagesLocked(uint64_t offset, uint64_t size) {
  // Only whole pages inside a free range: they belong to no live block.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t stop = offset + size;
  auto it = free_by_offset_.upper_bound(offset);
  if (it != free_by_offset_.begin()) --it;
  for (; it != free_by_offset_.end() && it->first < stop; ++it) {
    uint64_t lo = std::max(offset, it->first), hi = std::min(stop, it->first + it->second);
    // Pages are aligned in the address space, not relative to base_ (which is skewed).
    const uint64_t a = reinterpret_cast<uint64_t>(base_);
    uint64_t plo = (a + lo + page - 1) / page * page, phi = (a + hi) / page * page;
    if (phi > plo) madvise(reinterpret_cast<void*>(plo), phi - plo, MADV_DONTNEED);
  }
}

void MemoryPool::Reconfigure(uint64_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t aligned = capacity / kAlignment * kAlignment;
  if (aligned == capacity_) return;
  if (!used_.empty()) {
    ThrowInvalidArgument("Cannot change the capacity of device " + std::to_string(ordinal_) + " from " +
                             FormatBytes(capacity_) + " to " + FormatBytes(capacity) + " while " +
                             std::to_string(used_.size()) + " allocation(s) (" + FormatBytes(allocated_) +
                             ") are live. HINT: call configureDevice() before the first allocation.",
                         {Num("device", ordinal_), Num("capacity", static_cast<double>(capacity_)),
                          Num("requested", static_cast<double>(capacity)),
                          Num("liveAllocations", static_cast<double>(used_.size()))});
  }
  uint8_t* old_base = base_;
  uint64_t old_cap = capacity_;
  base_ = nullptr;
  try {
    Map(capacity);
  } catch (...) {
    base_ = old_base;
    capacity_ = old_cap;
    free_by_offset_.clear();
    free_by_size_.clear();
    InsertFree(0, capacity_);
    throw;
  }
  munmap(old_base - skew_, old_cap + skew_);  // the skew depends on the ordinal only
  peak_ = 0;
  cache_peak_ = 0;
}

uint64_t MemoryPool::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

PoolStats MemoryPool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return PoolStats{allocated_, peak_, capacity_, host_syncs_, LargestFreeLocked(),
                   static_cast<uint64_t>(used_.size()), total_allocs_, unreleased_bytes_};
}

void MemoryPool::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = allocated_;
}

void MemoryPool::AddHostSync() {
  std::lock_guard<std::mutex> lock(mu_);
  ++host_syncs_;
}

}  // namespace ascent
