// What `data prepare` reads and writes into, and how it reports progress: the input list (a
// directory stands for its files, sorted), their sizes, the output directory, and a progress
// line with rate and ETA.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct PrepareInput {
  std::string path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;  // when it was last modified (a resumed prepare checks it is unchanged)
};

// Files in the order given; a directory gives every regular file below it (hidden ones and
// those in hidden directories skipped), sorted by path. Throws DataError for a path that is
// neither, or a directory with no files.
//
// `outputs`: what this prepare writes (train.bin, its partial, ...). A directory's listing
// leaves them out, and their temporaries (NAME.tmp...): an --out inside an input directory
// would otherwise make an interrupted or finished prepare's own files inputs of the next one,
// which check_outputs refuses, so it could never be continued. A file named itself is kept
// (check_outputs refuses it).
std::vector<PrepareInput> prepare_inputs(const std::vector<std::string>& texts,
                                         const std::vector<std::string>& outputs = {});

// Creates the --out directory and its parents; throws DataError saying why it cannot.
void create_output_directory(const std::string& dir);

// On a terminal, "\rtokenizing: 45.1% 12.3/27.3 MB, 8.2 MB/s, 3456789 tokens, ETA 2s" at most
// ten times a second; otherwise (a log) the same as a plain line every 10 seconds, so a short
// prepare prints nothing.
class PrepareProgress {
 public:
  // already_done: bytes an interrupted prepare did (not counted in the rate).
  PrepareProgress(bool on, uint64_t total_bytes, uint64_t already_done = 0);
  ~PrepareProgress();
  PrepareProgress(const PrepareProgress&) = delete;
  PrepareProgress& operator=(const PrepareProgress&) = delete;
  void update(uint64_t done_bytes, uint64_t tokens);

 private:
  using Clock = std::chrono::steady_clock;
  bool on_, tty_;
  uint64_t total_, base_;
  Clock::time_point start_ = Clock::now(), last_ = start_;
  bool drawn_ = false;
};

}  // namespace trainrun
