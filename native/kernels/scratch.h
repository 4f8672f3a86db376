// One growable, 64-byte aligned buffer; kernels keep one per thread and role (thread_local), so
// it is freed at thread exit and grows to the largest size that thread has asked for.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace ascent::fast {

class AlignedScratch {
 public:
  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(p_); }

  // At least `count` elements of T; the previous contents are not kept when it grows.
  template <typename T>
  T* Get(size_t count) {
    const size_t bytes = count * sizeof(T);
    if (bytes > cap_) {
      std::free(p_);
      cap_ = (bytes + 63) & ~size_t{63};
      p_ = std::aligned_alloc(64, cap_);
      if (p_ == nullptr) {
        cap_ = 0;
        throw std::bad_alloc();
      }
    }
    return static_cast<T*>(p_);
  }

  // Frees the buffer when it holds more than `keep` bytes (a one-off large staging buffer).
  void Trim(size_t keep) {
    if (cap_ > keep) {
      std::free(p_);
      p_ = nullptr;
      cap_ = 0;
    }
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace ascent::fast
