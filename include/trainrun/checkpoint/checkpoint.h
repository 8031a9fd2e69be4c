// Checkpoint (docs/checkpoint-format.md), in one of two layouts:
// - one HDF5 file: rank 0 gathers and writes the full state;
// - sharded (checkpoint.sharded): a folder where every rank writes its even shard of the weights
//   and moments to its own HDF5 file, and rank 0 then writes a small checksummed MANIFEST, the
//   commit point: a folder without one is not a checkpoint.
// Both are written atomically (temp name, fsync, rename, fsync dir), checksummed (fletcher32 on
// the data; the single file also on a copy of every root attribute and the parameter table, the
// sharded one on the manifest and a CRC-32C per shard), optionally by a background thread, and
// both resume on any world size. Every function below that takes a checkpoint path accepts
// either. Only a usable state becomes a checkpoint: every weight and moment finite, every
// counter plausible; readers apply the same rules, so a file that fails them is never resumed
// from.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/core/errors.h"
#include "trainrun/core/param_entry.h"
#include "trainrun/core/shard.h"
#include "trainrun/core/state_buffer.h"

namespace trainrun {

struct TrainState {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int64_t samples_seen = 0;  // the data loader's cursor: next global sample index
  uint64_t seed = 0;         // all randomness (data order, dropout) derives from (seed, index)
  int64_t bad_steps_total = 0;
  int64_t restarts = 0;
  double lr_scale = 1.0;  // lowered by rollbacks after repeated bad steps
  int world_size = 1;
  std::string config_yaml;  // the resolved config
};

struct CheckpointData {
  TrainState state;
  std::vector<ParamEntry> params;
  StateBuffer weights;  // flat, full size
  StateBuffer adam_m;   // flat, full size (gathered when ZeRO-1 sharded it), or from
  StateBuffer adam_v;   // a ranged read: flat elements [moments_begin, + size)
  int64_t moments_begin = 0;
};

// One rank's part of a sharded checkpoint: `range` = shard_of(flat_size, world, rank) of the
// flat weights and moments (state.world_size is the world).
struct CheckpointShard {
  TrainState state;                // the same on every rank
  std::vector<ParamEntry> params;  // the whole table
  int64_t flat_size = 0;
  int rank = 0;
  Shard range{0, 0};
  StateBuffer weights;  // range.size() each; the moments empty without an optimizer
  StateBuffer adam_m;
  StateBuffer adam_v;
};

// Format 2 adds /metadata, the checksummed copy of the root attributes; format 3 stores
// /metadata and /config as scalar strings (h5io.h write_text) instead of character arrays.
// Format 1 files (no such copy) are still read: their data is verified, their metadata only
// checked for sense.
inline constexpr int kCheckpointFormatVersion = 3;
inline constexpr int kOldestCheckpointFormatVersion = 1;

// A snapshot that must not become a checkpoint: a weight or optimizer moment is NaN or infinite
// (the run has diverged). Nothing was written.
struct NonFiniteCheckpoint : CheckpointError {
  using CheckpointError::CheckpointError;
};

// "" when every weight and moment is finite; else the tensor holding the first non-finite
// value and how many there are. One pass over the three buffers.
std::string non_finite_reason(const CheckpointData& data);
std::string non_finite_reason(const CheckpointShard& shard);

// Writes `path` atomically. Throws NonFiniteCheckpoint for a non-finite snapshot and
// CheckpointError for anything else; never leaves a partial file at `path`.
void write_checkpoint(const std::string& path, const CheckpointData& data);
// Reads and verifies the file (verify_checkpoint's checks, the same code). Throws
// CheckpointError naming the file and why it cannot be used.
CheckpointData read_checkpoint(const std::string& path);
// The same, keeping only the `moments` flat range of the optimizer moments (a ZeRO-1 rank's
// shard): the weights whole, adam_m/adam_v that range, moments_begin its start. A sharded
// checkpoint's other ranges are then not even read (their owners read and check them); a single
// file is read whole and cut.
CheckpointData read_checkpoint(const std::string& path, Shard moments);

struct Verdict {
  bool ok = false;
  // With !ok: the file is intact but its content must not be used (a non-finite weight or
  // moment, an absurd value such as lr_scale inf); false for damage (checksums, truncation).
  bool unusable = false;
  std::string reason;  // why not, when !ok
  std::string note;    // a caveat of an ok file (format 1: metadata not checksummed)
  int64_t step = -1;
  // How to say what is wrong, after "checkpoint FILE is".
  const char* problem() const { return unusable ? "not usable" : "damaged"; }
};
// Full verification without keeping the data: every checksum (data and metadata), the layout,
// sane metadata values, every weight and moment finite. `trainrun inspect`, --resume, rollback
// and the supervisor all judge a file by this one function.
Verdict verify_checkpoint(const std::string& path);
// A human-readable listing for `trainrun inspect`: metadata, every dataset, and the verdict.
std::string describe_checkpoint(const std::string& path);

// RUN_DIR/checkpoints/step-NNNNNNN.h5
std::string checkpoint_path(const std::string& run_dir, int64_t step);
// RUN_DIR/checkpoints/step-NNNNNNN (a folder)
std::string sharded_checkpoint_path(const std::string& run_dir, int64_t step);
// A directory that is not itself a checkpoint: a run directory, whose checkpoints/ holds them.
// A sharded checkpoint's folder (named step-NNNNNNN, or holding a MANIFEST) is not one.
bool is_run_directory(const std::string& path);
// All checkpoints of a run (files, and folders with a MANIFEST), newest step first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// The newest checkpoint that verifies; newer damaged or unusable ones are named in `warnings`.
std::optional<std::string> latest_good_checkpoint(const std::string& run_dir,
                                                  std::vector<std::string>* warnings);

// Saves checkpoints for one run: keeps the newest keep_last, and with async the caller only
// waits for the previous write, not this one. One per process; for sharded checkpoints one on
// every rank, of which rank 0's commits and prunes.
class Checkpointer {
 public:
  Checkpointer(std::string run_dir, int keep_last, bool async, int rank = 0);
  ~Checkpointer();  // waits for the writer
  // Takes ownership of the snapshot. Returns seconds the caller was blocked. A non-finite
  // snapshot is refused in the caller's thread, async or not: throws NonFiniteCheckpoint and
  // writes and prunes nothing, so the newest checkpoint stays the newest.
  double save(CheckpointData&& data);
  // Sharded: writes this rank's file into the step's folder. With async, rank 0's writer then
  // waits for every rank's file (shard_timeout seconds at most) and commits the manifest;
  // without, the caller agrees with the other ranks that every file was written and has rank 0
  // call commit(). Refuses a non-finite shard like save().
  double save_shard(CheckpointShard&& shard);
  // Rank 0, after every rank's save_shard() returned: writes the manifest, then prunes.
  void commit(int64_t step, int world);
  // The buffers of the last snapshot written, sizes kept, for the next snapshot to fill (empty
  // when none is free: the first save, or a background write still holds them). Filling them
  // costs a copy; new ones would cost the page faults and zero fill of the whole state again.
  CheckpointData reuse_data();
  CheckpointShard reuse_shard();
  void wait();  // rethrows a background write's error
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainrun
