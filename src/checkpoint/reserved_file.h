// Internal to src/checkpoint: a new file whose disk space is reserved before HDF5 writes to it.
//
// Why: HDF5 1.10 does not survive a failed write at close. When H5Fclose cannot flush (disk
// full, quota), the file id stays registered over a half-destroyed file, and the library's own
// atexit shutdown later dereferences it: the process dies with SIGSEGV after it has reported
// the error. No close order or error handling on our side can repair that id, so a checkpoint
// is never handed to HDF5 on a disk that cannot hold it: the space for the whole file is
// allocated first (posix_fallocate, which fails cleanly with ENOSPC or EDQUOT), and HDF5 then
// only writes into blocks that already exist. Thread safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

// Creates `path` (which must not exist) holding `image` (a valid, empty HDF5 file) and reserves
// `bytes` for it, so that writes below that offset cannot fail for lack of space. HDF5 trims
// the file back to its real end when it closes it. On failure removes the file and throws
// CheckpointWriteError saying how much space was needed and how much was free.
void create_reserved_file(const std::string& path, const std::vector<char>& image, uint64_t bytes);

}  // namespace trainrun
