// Checkpoints (docs/checkpoint-format.md). A checkpoint is a folder step-NNNNNNN/: every rank
// writes the tensor slices it holds (state_dict.h) into its own HDF5 file, and rank 0 then writes
// MANIFEST, the commit point, which maps every slice of every global tensor to the file holding
// it, with a CRC-32C per slice and one over the manifest: a folder without one is not a
// checkpoint. Writes are atomic (temp name, fsync, rename, fsync dir), optionally by a background
// thread. A reader on any layout reads the slices it needs, so every checkpoint resumes on any
// world size and strategy. Only a usable state becomes a checkpoint: every value finite, every
// counter plausible; readers apply the same rules, so a checkpoint that fails them is never
// resumed from.
//
// Older formats are still read (never written by training): the single HDF5 file of formats 1-3
// (step-NNNNNNN.h5; `trainrun export` still writes one, format 3) and the sharded folder of
// formats 3-4 (an even flat shard per rank and a text MANIFEST). Every function below that takes
// a checkpoint path accepts all three.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/param_entry.h"
#include "trainrun/core/shard.h"
#include "trainrun/core/state_buffer.h"

namespace trainrun {

// A run's progress as a checkpoint summarizes it for the tools that only look (inspect, the
// launcher's resume, the supervisor, the sampler): every field is a named value that a component
// of the trainer stored (state_name below); the config is the checkpoint's own.
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

// The names of the values a TrainState summarizes, as the components store them
// (docs/checkpoint-format.md): the trainer's progress, the checkpoint manager's world size, the
// data stream's cursor and seed, the health monitor's counters.
namespace state_name {
inline constexpr const char* step = "train/step";
inline constexpr const char* tokens_seen = "train/tokens_seen";
inline constexpr const char* restarts = "train/restarts";
inline constexpr const char* world_size = "train/world_size";
inline constexpr const char* samples_seen = "data/samples_seen";
inline constexpr const char* seed = "data/seed";
inline constexpr const char* bad_steps_total = "health/bad_steps_total";
inline constexpr const char* lr_scale = "health/lr_scale";
}  // namespace state_name

// The named values of `s` (not its config), in the order above: how an old format's state is
// served to the components that restore it.
std::vector<NamedValue> values_of(const TrainState& s);
// The summary of `values` (config_yaml left empty). Throws CheckpointError naming `where` when
// one of the values is missing or of the wrong type.
TrainState train_state_of(const std::vector<NamedValue>& values, const std::string& where);

// A whole state in memory, as the single-file format holds it: what `export` writes and the
// sampler and the launcher read.
struct CheckpointData {
  TrainState state;
  std::vector<ParamEntry> params;
  StateBuffer weights;  // flat, full size
  StateBuffer adam_m;   // flat, full size; both empty for a checkpoint without optimizer state
  StateBuffer adam_v;
};

// One rank's part of a checkpoint, ready to write: the named values and every tensor the rank's
// components declared, and the slices it writes, packed back to back in `data`.
struct RankSnapshot {
  int rank = 0;
  std::vector<NamedValue> values;  // state_name::world_size: how many ranks write the checkpoint
  std::string config_yaml;         // the resolved config (rank 0 stores it)
  std::vector<StateDict::Tensor> tensors;
  struct Slice {
    size_t tensor;  // index into tensors
    Box box;
    int64_t begin;  // its first element in data
  };
  std::vector<Slice> slices;
  StateBuffer data;
  // train_state_of(values); throws CheckpointError when a summarized value is missing.
  TrainState summary() const;
};
// Fills `snap` from `state` (values, tensors, slices, and data by running every slice's fill),
// reusing snap's buffer when it is large enough.
void take_snapshot(const StateDict& state, RankSnapshot* snap);

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
std::string non_finite_reason(const RankSnapshot& snap);

// Writes `path` atomically. Throws NonFiniteCheckpoint for a non-finite snapshot and
// CheckpointError for anything else; never leaves a partial file at `path`.
void write_checkpoint(const std::string& path, const CheckpointData& data);
// Reads and verifies the file (verify_checkpoint's checks, the same code). Throws
// CheckpointError naming the file and why it cannot be used.
CheckpointData read_checkpoint(const std::string& path);
// Opens a checkpoint of any format for a restoring component: the manifest (or the old
// format's metadata) is read and checked now, the tensors when asked for. `state` receives the
// train state and resolved config. Throws CheckpointError naming the checkpoint and why it
// cannot be used.
std::unique_ptr<StateSource> open_checkpoint(const std::string& path, TrainState* state);

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

// RUN_DIR/checkpoints/step-NNNNNNN (a folder): where training writes the checkpoint of `step`.
std::string checkpoint_path(const std::string& run_dir, int64_t step);
// RUN_DIR/checkpoints/step-NNNNNNN.h5: the single-file format's name (read; `export` and tests
// write it).
std::string single_file_checkpoint_path(const std::string& run_dir, int64_t step);
// A directory that is not itself a checkpoint: a run directory, whose checkpoints/ holds them.
// A checkpoint's folder (named step-NNNNNNN, or holding a MANIFEST) is not one.
bool is_run_directory(const std::string& path);
// All checkpoints of a run (files, and folders with a MANIFEST), newest step first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// The newest checkpoint that verifies; newer damaged or unusable ones are named in `warnings`.
std::optional<std::string> latest_good_checkpoint(const std::string& run_dir,
                                                  std::vector<std::string>* warnings);

// Saves checkpoints for one run, one on every rank: each writes its own file into the step's
// folder; rank 0's also commits (writes the manifest) and keeps the newest keep_last. With async
// the caller only waits for the previous write, not this one.
class Checkpointer {
 public:
  Checkpointer(std::string run_dir, int keep_last, bool async, int rank = 0);
  ~Checkpointer();  // waits for the writer
  // Takes ownership of the snapshot and writes this rank's file into the step's folder. Returns
  // seconds the caller was blocked. A non-finite snapshot is refused in the caller's thread,
  // async or not: throws NonFiniteCheckpoint and writes nothing, so the newest checkpoint stays
  // the newest. With async, rank 0's writer then waits for every rank's file (a bounded time)
  // and commits; without, the caller agrees with the other ranks that every file was written
  // and has rank 0 call commit().
  double save(RankSnapshot&& snap);
  // Rank 0, after every rank's save() returned: writes the manifest, then prunes.
  void commit(int64_t step, int world);
  // The buffer of the last snapshot written, size kept, for the next snapshot to fill (empty
  // when none is free: the first save, or a background write still holds it). Filling it costs
  // a copy; a new one would cost the page faults and zero fill of the whole state again.
  RankSnapshot reuse();
  void wait();  // rethrows a background write's error
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainrun
