// Files trainrun creates or rewrites in a run directory never follow a symbolic link that it did
// not create: a link planted in a run directory (by a copy, an archive, another user) would
// otherwise have trainrun truncate or overwrite the link's target, any file of the user's.
// Two ways, one for each kind of writer:
//  - replaced whole (config.yaml, heartbeats, failure records, traces): written under a fresh
//    temporary name and renamed over the final name, which replaces a link without following it;
//  - opened in place (the run directory's lock, logs and metrics appended to, files HDF5 opens
//    by name): opened with O_NOFOLLOW, and a link there is refused with RunDirError (exit 73)
//    naming it and the fix.
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace trainrun {

// Whether `path` itself is a symbolic link (lstat).
bool is_symlink(const std::string& path);

// open(2) of `path` with O_NOFOLLOW | O_CLOEXEC added to `flags`. A symbolic link at `path`
// throws RunDirError; any other failure returns -1 with errno set, as open(2) does.
int open_no_follow(const std::string& path, int flags, mode_t mode = 0644);

// std::fopen's modes "w", "wb", "a", "ab" through open_no_follow (nullptr and errno on failure).
std::FILE* fopen_no_follow(const std::string& path, const char* mode);

// For writers that open a file by name themselves (HDF5, spdlog's file sink): throws
// RunDirError when `path` is a symbolic link. Checked just before their open.
void refuse_link(const std::string& path);

// refuse_link, and also anything else that is not a regular file (a FIFO, a device, a folder):
// for a file trainrun reads back before it rewrites it (metrics.jsonl on resume).
void refuse_special_file(const std::string& path);

// `text` as the whole of `path`: a new temporary beside it (O_EXCL | O_NOFOLLOW), then a rename
// over `path` (a link there is replaced, not followed). Not fsync'd: write_file_durably
// (durable_file.h) is for files that must survive a power loss. Throws Error(kExitWrite) naming
// the file and the system's reason (ENOSPC: the disk is full); the temporary never stays.
void replace_file(const std::string& path, const std::string& text);

}  // namespace trainrun
