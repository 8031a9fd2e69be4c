// Facts about this host the launcher needs: cores (as mpirun counts slots), programs on PATH.
#pragma once

#include <string>
#include <vector>

namespace trainrun {

// Physical cores (not hyperthreads) in this process's CPU affinity mask, as hwloc and thus
// mpirun count slots on a node; falls back to the logical CPU count when sysfs is unreadable.
int available_cores();

// The first executable `name` in $PATH's directories (an empty entry is "."); "" if none.
std::string find_on_path(const std::string& name);

// The hosts a hostfile lists (first word of each line, comments and blank lines skipped),
// each once, in order.
std::vector<std::string> hostfile_hosts(const std::string& path);

// This host's name as the ranks report it (gethostname), "localhost" when it has none.
std::string host_name();

}  // namespace trainrun
