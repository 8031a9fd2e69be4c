// Facts about this host the launcher needs: programs on PATH, the hosts a hostfile lists.
#pragma once

#include <string>
#include <vector>

namespace trainrun {

// The first executable `name` in $PATH's directories (an empty entry is "."); "" if none.
std::string find_on_path(const std::string& name);

// The hosts a hostfile lists (first word of each line, comments and blank lines skipped),
// each once, in order.
std::vector<std::string> hostfile_hosts(const std::string& path);

}  // namespace trainrun
