// The one place trainrun memory-maps a file (token shards, document indexes): a read-only
// mapping of a regular file, registered for as long as it lives with a SIGBUS handler that names
// the file when it changes underneath the mapping.
//
// A mapped file that is truncated, or overwritten in place (`cp new.bin train.bin` truncates it
// first), has pages past its new end: reading one raises SIGBUS, which killed every rank with
// exit 135 and no message. The handler maps the faulting address back to the registered file,
// writes "error: PATH: ..." to stderr and ends the process with exit 3 (bad data), as the
// checks of every window read promise (docs/data-format.md). A fault outside every mapping goes
// to the handler that was there before (a failure record's, a sanitizer's) or the default.
#pragma once

#include <cstddef>
#include <string>

namespace trainrun {

class MappedFile {
 public:
  // Maps `path` read-only. `what` names the file in messages ("token shard"). Throws DataError
  // naming the file for a file that cannot be opened, is not a regular file, or is shorter than
  // `min_bytes` (`too_short`, when given, is the message then; else a generic one).
  MappedFile(const std::string& path, const char* what, size_t min_bytes = 1,
             const std::string& too_short = "");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return static_cast<const unsigned char*>(map_); }
  size_t size() const { return len_; }
  // madvise(2) over the whole mapping (MADV_SEQUENTIAL, MADV_RANDOM); advice only.
  void advise(int advice) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t len_ = 0;
  int slot_ = -1;  // in the SIGBUS handler's table; -1: not registered (the table was full)
};

}  // namespace trainrun
