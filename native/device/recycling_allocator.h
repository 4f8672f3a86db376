// An allocator for std::allocate_shared that keeps freed single objects for the next
// allocation of the same type on the same thread. Every device buffer is a Block in one
// shared_ptr allocation (block and reference count together); an op makes its output block
// and a release frees it, and a loop that holds its outputs (a step's activations, a
// benchmark's batch of results) frees hundreds in a row, past what malloc's per-thread
// cache keeps, so each allocation went to malloc's slower paths.
//
// The kept memory is per thread, so taking and keeping need no lock: a block freed on a
// stream thread (its last reference was a queued op's) is kept there, at most kKeep of them,
// and the rest go back to the heap. A thread's kept memory is freed when the thread exits.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ascent {

template <class T>
class RecyclingAllocator {
 public:
  using value_type = T;
  static constexpr size_t kKeep = 1024;

  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}  // NOLINT: rebinding, as allocators convert

  T* allocate(size_t n) {
    if (n == 1) {
      if (std::vector<void*>* kept = Kept(); kept != nullptr && !kept->empty()) {
        void* p = kept->back();
        kept->pop_back();
        return static_cast<T*>(p);
      }
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }

  // Never allocates (the list's room is reserved up front), so freeing cannot throw.
  void deallocate(T* p, size_t n) noexcept {
    if (n == 1) {
      if (std::vector<void*>* kept = Kept(); kept != nullptr && kept->size() < kept->capacity()) {
        kept->push_back(p);
        return;
      }
    }
    ::operator delete(p);
  }

  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const RecyclingAllocator<U>&) const {
    return false;
  }

 private:
  // This thread's kept objects of T's size; the holder frees them when the thread exits. Null
  // once it did (a block freed later in the thread's exit goes straight to the heap).
  struct Holder {
    std::vector<void*> kept;
    Holder() {
      try {
        kept.reserve(kKeep);
      } catch (...) {
        // No room: nothing is kept on this thread (capacity 0).
      }
    }
    ~Holder() {
      Gone() = true;
      for (void* p : kept) ::operator delete(p);
    }
  };
  static bool& Gone() {
    thread_local bool gone = false;  // trivially destructible: readable during thread exit
    return gone;
  }
  static std::vector<void*>* Kept() {
    if (Gone()) return nullptr;
    thread_local Holder holder;
    return &holder.kept;
  }
};

}  // namespace ascent
