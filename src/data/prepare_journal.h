// The journal of a resumable `data prepare` (docs/data-format.md): DIR/.prepare.json records
// what the prepare was asked to do (its fingerprint: the inputs' paths, sizes and mtimes, the
// tokenizer's SHA-256, val_fraction, the end-of-text id, the token width) and how far it got (the
// inputs done, the position inside the current one, the token counts of the partial shards
// DIR/train.bin.partial and DIR/val.bin.partial). An interrupted prepare run again with the same
// arguments truncates the partial shards to the last entry and continues from there; with other
// arguments it is refused, naming what changed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "manifest.h"
#include "prepare_inputs.h"
#include "trainrun/data/tokenizer.h"

namespace trainrun {

inline constexpr const char* kJournalName = ".prepare.json";
inline constexpr const char* kPartialSuffix = ".partial";

// What must be the same for a prepare to continue another's shards.
struct PrepareFingerprint {
  struct Input {
    std::string path;  // absolute
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<Input> inputs;
  std::string tokenizer = "bytes";  // "bytes", or the SHA-256 of tokenizer.json
  std::string tokenizer_path;       // for messages only
  double val_fraction = 0;
  int64_t eot = -1;  // the id between documents, -1 none
  int vocab_size = 0, dtype = 0;
  uint64_t block_bytes = 0;  // where blocks are cut (it can decide a cut inside a long word)
};

PrepareFingerprint::Input fingerprint_input(const PrepareInput& in);

// How far a prepare got: inputs [0, inputs_done) are complete; when `started`, the separator
// before input inputs_done is written and its first `offset` bytes too (`read_end`: how far its
// reader had read, so a resumed reader cuts its blocks where the first one did).
struct PreparePosition {
  size_t inputs_done = 0;
  bool started = false;
  uint64_t offset = 0, read_end = 0;
  uint64_t input_tokens = 0;  // tokens of the started input so far
  uint64_t train_tokens = 0, val_tokens = 0;
  std::vector<ManifestInput> done;  // the manifest's entries of the complete inputs
  bool finished = false;  // every input done and the shards complete: only renames are left
};

class ShardWriter;

// Thrown where a test asked a prepare to stop (PrepareRequest::stop_after_inputs).
struct PrepareStopped : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Owns DIR/.prepare.json for one prepare, and holds a lock on DIR so that two prepares do not
// write the same partial shards.
class PrepareJournal {
 public:
  // Locks dir (ConfigError if another prepare holds it). With `force`, or when there is no
  // journal, starts afresh (removing a journal and partial shards trainrun wrote); otherwise
  // the journal must match `fp` (ConfigError naming each difference and the fix) and its
  // position is where this prepare continues, said on stderr.
  PrepareJournal(const std::string& dir, PrepareFingerprint fp, bool force);
  PrepareJournal(const PrepareJournal&) = delete;
  PrepareJournal& operator=(const PrepareJournal&) = delete;

  const PreparePosition& start() const { return start_; }
  bool resumed() const { return resumed_; }
  // Records `pos` after making both shards durable (their data, then the journal by rename).
  void record(const PreparePosition& pos, ShardWriter& train, ShardWriter& val);
  // At a boundary: an input complete (between_inputs; inputs_done of them), or a block inside
  // one. True when an entry is due (a second or more since the last): the caller record()s it.
  // Where a test asked to stop, stops (throws PrepareStopped, or SIGKILL).
  bool boundary(size_t inputs_done, bool between_inputs);
  // Between renaming train.bin and val.bin: where a stopping test stops if no boundary came.
  void rename_point();
  // Tests only: PrepareRequest's stop_after_inputs, stop_kills, journal_seconds, after_entry.
  void test_hooks(const PrepareRequest& req);
  // Removes the journal (after the shards are renamed and the manifest written), or, discard,
  // the partial shards too (the prepare failed in a way that running it again cannot fix).
  void remove(bool discard = false);

 private:
  void write(const PreparePosition& pos);
  bool due() const;
  [[noreturn]] void stop() const;

  struct Fd {
    int fd = -1;
    ~Fd();
  };
  std::string dir_, path_;
  Fd dir_fd_;  // open (and locked) for the whole prepare
  PrepareFingerprint fp_;
  PreparePosition start_;
  bool resumed_ = false;
  bool replaces_ = false;  // the prepare had --force: it may replace outputs that exist
  std::chrono::steady_clock::time_point last_;
  std::chrono::steady_clock::duration cost_{};  // of the last entry
  std::chrono::steady_clock::duration interval_ = std::chrono::seconds(1);
  int64_t stop_after_ = -1;
  bool stop_kills_ = false, stopping_ = false;
  std::function<void()> after_entry_;
};

// What `data prepare` finds in DIR before it starts: whether there is a journal, and whether
// the outputs that exist may be replaced by continuing it (the interrupted prepare had --force,
// or had finished and was renaming).
struct JournalPeek {
  bool present = false, replaces_outputs = false;
};
JournalPeek peek_journal(const std::string& dir);

// Human bytes: "812 bytes", "3.4 MB", "1.2 GB".
std::string human_bytes(uint64_t n);

}  // namespace trainrun
