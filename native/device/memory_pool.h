// One arena per device: a single mmap(MAP_NORESERVE) reservation of `capacity`
// bytes carved by a best-fit allocator with a coalescing free list. Invariants:
// every block offset and size is a multiple of kAlignment; free blocks never touch
// (they are merged on free); allocated + sum(free) == capacity; nothing is ever
// handed out past capacity. Freed blocks of at least kReleaseThreshold bytes go back
// to the OS (madvise(MADV_DONTNEED)), but lazily, as a caching allocator keeps them:
// freed pages stay resident while the resident free bytes stay within the device's
// high-water mark of allocated bytes (at least kResidentFreeBudget), so a training
// step's activations, freed in the backward, are the next step's outputs without a
// page fault (a fresh 1 MiB output cost ~0.7 ms of faults per op, a 4 MiB one ~4 ms,
// and with the old fixed 16 MiB budget a tiny model's step cycled through far more
// than that and faulted on most outputs). The host memory this keeps is bounded by
// what the device already used at its peak. Large blocks are cached the same way: a
// weight sync's staging and casts (hundreds of MiB, freed after every sync) used to go
// back to the OS at once, and the next sync zeroed every page again on first touch
// (the kernel's clear_page was most of a 514 MB model's bf16 sync). EmptyCache() gives
// every cached page back, as torch.cuda.empty_cache() does; an engine's sleep() calls it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/node_cache.h"

namespace ascent {

struct PoolStats {
  uint64_t allocated;
  uint64_t peak;
  uint64_t capacity;
  uint64_t host_syncs;
  uint64_t largest_free_block;
  uint64_t num_allocs;    // live allocations
  uint64_t total_allocs;  // allocations ever made
  uint64_t cached;        // free bytes kept resident for reuse (EmptyCache() returns them)
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
  // Returns every cached free page to the OS; returns the bytes that were cached.
  uint64_t EmptyCache();
  void AddHostSync();

 private:
  void Map(uint64_t capacity);
  void Unmap();
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);
  uint64_t LargestFreeLocked() const;
  // madvise(MADV_DONTNEED) the whole pages of [offset, offset + size) that are free.
  void ReleaseFreePagesLocked(uint64_t offset, uint64_t size);
  // Gives every cached range's pages back (unreleased_ emptied); returns the bytes it held.
  uint64_t ReleaseCachedLocked();

  const int ordinal_;
  mutable std::mutex mu_;
  uint8_t* base_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t skew_ = 0;  // bytes between the mapping's start and base_ (see Map)
  std::map<uint64_t, uint64_t> free_by_offset_;      // offset -> size
  std::multimap<uint64_t, uint64_t> free_by_size_;   // size -> offset
  std::unordered_map<uint64_t, uint64_t> used_;      // offset -> size
  // Nodes of erased entries of the three maps above, reused by the next insert.
  NodeCache<std::map<uint64_t, uint64_t>> offset_nodes_;
  NodeCache<std::multimap<uint64_t, uint64_t>> size_nodes_;
  NodeCache<std::unordered_map<uint64_t, uint64_t>> used_nodes_;
  // Removes [offset, offset + size) from unreleased_ (it is being handed out).
  void ForgetResidentLocked(uint64_t offset, uint64_t size);
  // Free ranges of at least kReleaseThreshold bytes whose pages may be resident (offset,
  // size), disjoint; unreleased_bytes_ is their sum. Allocate() removes what it hands out.
  // Kept within max(kResidentFreeBudget, cache_peak_).
  std::map<uint64_t, uint64_t> unreleased_;  // offset -> size
  uint64_t unreleased_bytes_ = 0;
  uint64_t allocated_ = 0;
  uint64_t peak_ = 0;
  // The cache's budget: the high-water mark of allocated bytes since the arena was mapped.
  // Not peak_, which ResetPeak() lowers: the weight sync resets it every step to report
  // its own staging, and the 16-rank quickstart's trainer devices then cached 16 MiB
  // at most, so their kernels' outputs kept faulting fresh pages.
  uint64_t cache_peak_ = 0;
  uint64_t host_syncs_ = 0;
  uint64_t total_allocs_ = 0;
};

// Physical RAM of the host, the upper bound of any device capacity.
uint64_t HostMemoryBytes();

}  // namespace ascent
