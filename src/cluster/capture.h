// Running a short command (sbatch) and collecting what it printed.
#pragma once

#include <string>
#include <vector>

namespace trainrun::cluster_detail {

struct Captured {
  int exit_code = 0;  // the command's status; 128+N when killed by signal N
  std::string out, err;
};

// Runs argv[0] (looked up in PATH) with argv and stdin from /dev/null, and waits for it.
// `found` is set to false when argv[0] could not be started (then `err` says why).
Captured run_capture(const std::vector<std::string>& argv, bool* found);

}  // namespace trainrun::cluster_detail
