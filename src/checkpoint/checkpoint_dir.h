// Internal to src/checkpoint: housekeeping of a run's checkpoints/ folder.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainrun {

// Removes RUN_DIR/checkpoints/step-NNNNNNN.h5.tmp-PID files whose writer PID is no longer
// alive (a writer killed mid-write); other names are left alone. With `step_folders`, also
// the temporaries inside step folders: only safe before any rank of this job writes (a rank on
// another host has pids this host knows nothing of). Returns how many were removed.
int remove_stale_temp_files(const std::string& run_dir, bool step_folders = false);

// True when `path` opens as HDF5 with trainrun's root attributes, or is a folder holding a
// MANIFEST and nothing but the files trainrun writes there: a checkpoint trainrun wrote, usable
// or not. Pruning deletes nothing else.
bool is_trainrun_checkpoint(const std::string& path);

// Removes a checkpoint: a file, or a folder's MANIFEST and rank files (and their temporaries),
// then the folder when nothing else is left in it. False (and `ec` set on an error) when
// something stays.
bool remove_checkpoint(const std::string& path, std::error_code& ec);

// Step folders without a MANIFEST (saves that never committed), with their steps.
std::vector<std::pair<int64_t, std::string>> unfinished_checkpoints(const std::string& run_dir);

// The step in a checkpoint's name (file or folder), -1 for another name.
int64_t step_of_checkpoint(const std::string& path);

}  // namespace trainrun
