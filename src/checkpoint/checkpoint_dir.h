// Internal to src/checkpoint: housekeeping of a run's checkpoints/ folder.
#pragma once

#include <string>

namespace trainrun {

// Removes RUN_DIR/checkpoints/*.tmp-PID files whose writer PID is no longer alive (a writer
// killed mid-write). Returns how many were removed.
int remove_stale_temp_files(const std::string& run_dir);

}  // namespace trainrun
