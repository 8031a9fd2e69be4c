// Files that survive a crash or a power loss at any moment: written under a temporary name,
// fsync'd, renamed over the final name, and the folder fsync'd, so a reader sees the old file or
// the whole new one and never a part. Nothing here knows a format: checkpoints, their shards and
// the sharded checkpoint's manifest are written through it. Every function throws
// Error(kExitWrite) naming the path and the system's reason (ENOSPC: the disk is full).
#pragma once

#include <string>

namespace trainrun {

// fsync of a file, or of a folder (which makes a rename or a new name in it durable).
void fsync_path(const std::string& path, bool directory);
// Renames `tmp` to `path` and makes the rename durable (fsync of the folder).
void rename_durably(const std::string& tmp, const std::string& path);
// `text` as the whole of a new file `tmp` (a stale one of that name is removed first; a link
// there is never followed), fsync'd when `sync`. Nothing stays at `tmp` when it throws.
void write_new_file(const std::string& tmp, const std::string& text, bool sync);
// `text` as the whole of `path`, durably: PATH.tmp-PID, fsync, rename_durably. The temporary is
// removed whatever fails; an earlier `path` stays as it was until the rename.
void write_file_durably(const std::string& path, const std::string& text);

}  // namespace trainrun
