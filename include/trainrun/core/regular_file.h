// Reading a file that trainrun did not just write itself, such as a run directory's
// metrics.jsonl and config.yaml (`report` reads directories that were copied, unpacked or made by
// someone else). Whatever is at the name must be a regular file no larger than a stated cap: a
// FIFO would block open(2) until some writer came (forever), a device (/dev/zero, or a link to
// it) never ends, a sparse file can claim terabytes. So the name is opened without blocking,
// checked on the open descriptor (no race with a rename), and never read past its cap: every
// read ends, in bounded time and memory, with the file's bytes or an error naming it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace trainrun {

// What a file of type `mode` (stat's st_mode) is, for messages: "a FIFO", "a directory", ...
const char* file_kind(mode_t mode);

// What a reader allows and what its errors say.
struct FileRule {
  uint64_t max_bytes;    // a larger file is refused
  int exit_code;         // the code of the Error thrown (errors.h)
  std::string_view fix;  // ends every message: what to do about it
};

// The whole of `path`; nullopt when nothing is there. Throws Error(rule.exit_code) naming the
// path when it is not a regular file (itself or a symbolic link's target), holds more than
// rule.max_bytes, or cannot be read.
std::optional<std::string> read_regular_file(const std::string& path, const FileRule& rule);

// The same rule, read a line at a time: `line` gets each line without its '\n'. A line longer
// than `max_line` bytes is skipped whole (held in memory no longer than that). Returns false
// when nothing is there.
bool read_regular_lines(const std::string& path, const FileRule& rule, size_t max_line,
                        const std::function<void(std::string_view)>& line);

}  // namespace trainrun
