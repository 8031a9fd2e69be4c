// Internal to src/checkpoint: housekeeping of a run's checkpoints/ folder.
#pragma once

#include <string>

namespace trainrun {

// Removes RUN_DIR/checkpoints/step-NNNNNNN.h5.tmp-PID files whose writer PID is no longer
// alive (a writer killed mid-write); other names are left alone. Returns how many were removed.
int remove_stale_temp_files(const std::string& run_dir);

// True when `path` opens as HDF5 with trainrun's root attributes: a checkpoint trainrun wrote,
// usable or not. Pruning deletes nothing else.
bool is_trainrun_checkpoint(const std::string& path);

}  // namespace trainrun
