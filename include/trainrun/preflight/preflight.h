// Preflight checks: what every run passes before anything starts or is written (the memory
// the plan needs, the open files the job needs, the data it reads), and what `validate` and
// --dry-run check too. Each refuses with the error a rank would meet later, and its fix.
#pragma once

#include <cstdint>
#include <string>

#include "trainrun/core/experiment.h"

namespace trainrun {

// Refuses (ConfigError, with the numbers) a run whose planned memory per rank exceeds what
// this machine (CPU: MemAvailable shared by the node's ranks) or the GPU (table) has.
void check_memory(const Experiment& exp);

// Open files a process needs at this job's size (launcher: mpirun and the node's ranks; else a
// rank), with who needs them and the sum spelled out for messages.
struct OpenFilesNeed {
  int64_t files = 0;
  std::string who;  // "mpirun with 16 rank(s) on this node"
  std::string sum;  // "32 + 4 per rank"
};
OpenFilesNeed open_files_need(const Experiment& exp, bool launcher);
// Raises RLIMIT_NOFILE's soft limit to the hard one when it is below the need (children inherit
// it); throws LaunchError (exit 6) with the fix when the hard limit is below it too.
void check_open_files(const OpenFilesNeed& need);

// Opens the train and val data as a rank will, and lets them go: throws DataError (exit 3)
// naming the file and the problem. The owner calls it before writing anything in the run
// directory; `validate` and --dry-run call it too.
void check_data(const Experiment& exp);

}  // namespace trainrun
