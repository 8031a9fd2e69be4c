// Facts about this host that a rank and the launcher both need: its cores (as mpirun counts
// slots, and a rank's default thread count) and its name (failure records, the run's lock).
#pragma once

#include <string>

namespace trainrun {

// Physical cores (not hyperthreads) in this process's CPU affinity mask, as hwloc and thus
// mpirun count slots on a node; falls back to the logical CPU count when sysfs is unreadable.
int available_cores();

// This host's name as the ranks report it (gethostname), "localhost" when it has none.
std::string host_name();

}  // namespace trainrun
