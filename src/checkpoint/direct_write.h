// Internal to src/checkpoint: writes a checkpoint's bulk data with O_DIRECT, past the page cache.
//
// Why: measured on a 2-core machine training on both cores, 305 MB written through the page cache
// (by dd, from a SCHED_IDLE thread) slowed the training steps around it by 0.7-1 s per write: the
// kernel allocates, fills and writes back 75,000 cache pages, and that work does not run at the
// writer's priority. The same bytes written with O_DIRECT cost the steps next to nothing. A
// checkpoint is not read back soon, so caching it buys nothing.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

namespace trainrun {

// Direct I/O needs the file offset, the buffer address and the length to be multiples of the
// device's block size; 4 KiB covers every block size in use.
inline constexpr size_t kDirectAlign = 4096;

struct DirectWriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes the longest prefix of [data, data + bytes) that direct I/O allows (a multiple of
// kDirectAlign bytes) to `path` at `offset`, in slabs of `slab` bytes, calling each(slab, size)
// once each slab is written (never for a slab the caller will write again). Returns the bytes
// written: 0 when direct I/O is not possible (offset or buffer misaligned, a file system without
// O_DIRECT), and the caller writes the rest the usual way. The file must exist and have its space
// allocated (reserved_file.h). Throws DirectWriteError naming errno's reason when a write fails.
size_t write_direct_prefix(const std::string& path, off_t offset, const char* data, size_t bytes,
                           size_t slab, const std::function<void(const char*, size_t)>& each);

}  // namespace trainrun
