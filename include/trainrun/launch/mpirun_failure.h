// Reading mpirun's account of a failed job (Open MPI 4.x wording): the supervisor's fallback
// for ranks that wrote no failure record (killed by SIGKILL, host lost), and for run_launch.
#pragma once

#include <string>

namespace trainrun {

// The first rank failure Open MPI reports.
struct MpirunFailure {
  std::string text;  // e.g. "rank 1 on node7 killed by signal 9 (Killed)"; "" when none named
  int rank = -1;     // the rank it names, -1 when it names none
  std::string host;  // "" when it does not say
  // mpirun could not start the job (its daemon on a host never came up: the host unreachable,
  // ssh refused, the program missing there): no rank ran, so no step was reached.
  bool not_launched = false;
};
MpirunFailure read_mpirun_failure(const std::string& mpirun_stderr);

// read_mpirun_failure(mpirun_stderr).text
std::string describe_mpirun_failure(const std::string& mpirun_stderr);

}  // namespace trainrun
