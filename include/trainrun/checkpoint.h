// Checkpoint: one HDF5 file per checkpoint (docs/checkpoint-format.md), written atomically
// (temp name, fsync, rename, fsync dir), checksummed (fletcher32), optionally by a background
// thread. Rank 0 writes the full, gathered state, so a checkpoint resumes on any world size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/param_entry.h"

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
  std::vector<float> weights;  // flat, full size
  std::vector<float> adam_m;   // flat, full size (gathered when ZeRO-1 sharded it)
  std::vector<float> adam_v;
};

inline constexpr int kCheckpointFormatVersion = 1;

// Writes `path` atomically. Throws CheckpointError; never leaves a partial file at `path`.
void write_checkpoint(const std::string& path, const CheckpointData& data);
// Reads and verifies every dataset's checksum. Throws CheckpointError naming the file and why.
CheckpointData read_checkpoint(const std::string& path);

struct Verdict {
  bool ok = false;
  std::string reason;  // why not, when !ok
  int64_t step = -1;
};
// Full verification (opens, checks every checksum and shape) without keeping the data.
Verdict verify_checkpoint(const std::string& path);
// A human-readable listing for `trainrun inspect`: metadata, every dataset, and the verdict.
std::string describe_checkpoint(const std::string& path);

// RUN_DIR/checkpoints/step-NNNNNNN.h5
std::string checkpoint_path(const std::string& run_dir, int64_t step);
// All checkpoint files of a run, newest step first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);
// The newest checkpoint that verifies; damaged newer ones are reported in `warnings`.
std::optional<std::string> latest_good_checkpoint(const std::string& run_dir,
                                                  std::vector<std::string>* warnings);

// Saves checkpoints for one run: keeps the newest keep_last, and with async the caller only
// waits for the previous write, not this one.
class Checkpointer {
 public:
  Checkpointer(std::string run_dir, int keep_last, bool async);
  ~Checkpointer();  // waits for the writer
  // Takes ownership of the snapshot. Returns seconds the caller was blocked.
  double save(CheckpointData&& data);
  void wait();  // rethrows a background write's error
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainrun
