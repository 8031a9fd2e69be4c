// StateBuffer: a std::vector<float> whose resize leaves new elements uninitialised and whose data
// is page-aligned.
//
// Why: checkpoint buffers hold a whole training state (gigabytes), and each is sized only to be
// overwritten at once, element by element (a read, a copy, a gather). A value-initialising resize
// would touch every page first: on the machines measured, zero-filling 311 MB took 0.11 s, a third
// of a cold checkpoint read, serially before the read could begin. Sized this way, each page is
// first touched by the write that fills it (e.g. the reader thread's pread, slab_reader.h).
// Contract: code that grows a StateBuffer writes every new element before reading it.
// The data starts on a 4 KiB boundary, so a checkpoint writes it with direct I/O straight from
// where it is (src/checkpoint/direct_write.h).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace trainrun {

template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  static constexpr std::align_val_t kAlign{4096};
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, kAlign); }

  // Default-initialises (for float: leaves as is) instead of value-initialising.
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using StateBuffer = std::vector<float, UninitializedAllocator<float>>;

}  // namespace trainrun
