// One arena per device: a single mmap(MAP_NORESERVE) reservation of `capacity`
// bytes carved by a best-fit allocator with a coalescing free list. Invariants:
// every block offset and size is a multiple of kAlignment; free blocks never touch
// (they are merged on free); allocated + sum(free) == capacity; nothing is ever
// handed out past capacity. Freed blocks of at least kReleaseThreshold bytes go back
// to the OS (madvise(MADV_DONTNEED)), but lazily: up to kResidentFreeBudget bytes of
// them stay resident so the next op's output does not page-fault on every page
// (a fresh 1 MiB output cost ~0.5 ms of faults per op, a 512^3 matmul ~3 ms); a
// block larger than the budget, or one that would exceed it, releases them all.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ascent {

struct PoolStats {
  uint64_t allocated;
  uint64_t peak;
  uint64_t capacity;
  uint64_t host_syncs;
  uint64_t largest_free_block;
  uint64_t num_allocs;    // live allocations
  uint64_t total_allocs;  // allocations ever made
};

class MemoryPool {
 public:
  static constexpr uint64_t kAlignment = 64;
  static constexpr uint64_t kReleaseThreshold = 64 * 1024;
  static constexpr uint64_t kResidentFreeBudget = 16 * 1024 * 1024;

  MemoryPool(int ordinal, uint64_t capacity);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Returns the offset of a fresh block of at least `bytes` (rounded up to
  // kAlignment, minimum kAlignment). Throws DeviceOOM (AscentException).
  uint64_t Allocate(uint64_t bytes);
  void Free(uint64_t offset);
  // Re-reserves the arena with a new capacity; InvalidArgument when blocks are live
  // and the capacity differs.
  void Reconfigure(uint64_t capacity);

  uint8_t* base() const { return base_; }
  uint64_t capacity() const;
  PoolStats Stats() const;
  void ResetPeak();
  void AddHostSync();

 private:
  void Map(uint64_t capacity);
  void Unmap();
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);
  uint64_t LargestFreeLocked() const;
  // madvise(MADV_DONTNEED) the whole pages of [offset, offset + size) that are free.
  void ReleaseFreePagesLocked(uint64_t offset, uint64_t size);

  const int ordinal_;
  mutable std::mutex mu_;
  uint8_t* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t skew_ = 0;  // bytes between the mapping's start and base_ (see Map)
  std::map<uint64_t, uint64_t> free_by_offset_;      // offset -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;   // size -> offset
  std::unordered_map<uint64_t, uint64_t> used_;      // offset -> size
  // Blocks >= kReleaseThreshold freed but not yet released (offset, size); their sizes
  // sum to unreleased_bytes_ <= kResidentFreeBudget. Parts may have been reallocated.
  std::vector<std::pair<uint64_t, uint64_t>> unreleased_;
  uint64_t unreleased_bytes_ = 0;
  uint64_t allocated_ = 0;
  uint64_t peak_ = 0;
  uint64_t host_syncs_ = 0;
  uint64_t total_allocs_ = 0;
};

// Physical RAM of the host, the upper bound of any device capacity.
uint64_t HostMemoryBytes();

}  // namespace ascent
