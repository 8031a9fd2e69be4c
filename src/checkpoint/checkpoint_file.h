// Internal to src/checkpoint: the single-file format (formats 1-3, one HDF5 file holding the
// whole state by parameter name), which `trainrun export` writes and every reader still reads;
// training writes the folder format (checkpoint_folder.h).
#pragma once

#include <functional>
#include <string>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

// What every format's reader returns: the data, and a caveat of an ok checkpoint.
struct Loaded {
  CheckpointData data;
  std::string note;
};
// The Verdict of `load`, which throws Unusable for an intact checkpoint that must not be used and
// h5::H5Failure for damage; the data into `data` when given.
Verdict verdict_of(const std::function<Loaded()>& load, CheckpointData* data);

// The single file of formats 1-3: read (into `data` when given) and verify every byte; and
// everything its headers tell, which may survive damage to the data.
Verdict judge_file(const std::string& path, CheckpointData* data);
std::string describe_file(const std::string& path);

}  // namespace trainrun
