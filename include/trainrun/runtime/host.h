// Facts about this host and process that a rank and the launcher both need: its cores (as
// mpirun counts slots, and a rank's default thread count), its name (failure records, the
// run's lock) and this process's arguments (a re-exec, the run's provenance).
#pragma once

#include <string>
#include <vector>

namespace trainrun {

// Physical cores (not hyperthreads) in this process's CPU affinity mask, as hwloc and thus
// mpirun count slots on a node; falls back to the logical CPU count when sysfs is unreadable.
int available_cores();

// This host's name as the ranks report it (gethostname), "localhost" when it has none.
std::string host_name();

// This process's arguments as the kernel holds them (/proc/self/cmdline), argv[0] first.
std::vector<std::string> own_arguments();

}  // namespace trainrun
