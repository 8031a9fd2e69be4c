// Internal to src/checkpoint: reads a byte range of an open file in slabs on a thread of its own,
// handing each slab to the caller in order as it arrives.
//
// Why: a cold checkpoint read is the disk's time plus the CPU's (the kernel's copy into place,
// then CRC-32C and the finiteness check). Read-ahead hints alone overlap the two only partly,
// since one thread still alternates between them; with the copy on a second thread, the caller
// checks slab i while slab i + 1 is read, and a read takes about as long as the slower of the
// two. Works on raw bytes: callers use it only for data HDF5 stores as plain, unfiltered
// contiguous bytes at a known offset.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <vector>

namespace trainrun {

struct SlabReadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using ByteSlabFn = std::function<void(const char* data, size_t size)>;

// One byte range of the file: `bytes` bytes from `offset`, landing at out + their offset within
// the range when `out` is given, else in a ring of buffers reused once `each` has returned for
// them (verifying without holding the data).
struct SlabRange {
  off_t offset = 0;
  size_t bytes = 0;
  char* out = nullptr;
  ByteSlabFn each;
};

// Reads the ranges of `fd`, in order, in slabs of `slab` bytes (a range's last slab may be
// shorter), one reader thread running ahead across range boundaries. Calls the range's
// each(data, size) for every slab, in order, in the caller's thread. Throws SlabReadError naming
// errno's reason when a read fails or the file ends early; an exception from `each` stops the
// reading and propagates. Never leaves its thread running.
void read_slabs(int fd, const std::vector<SlabRange>& ranges, size_t slab);

// One range.
inline void read_slabs(int fd, off_t offset, size_t bytes, size_t slab, char* out,
                       const ByteSlabFn& each) {
  read_slabs(fd, {SlabRange{offset, bytes, out, each}}, slab);
}

}  // namespace trainrun
