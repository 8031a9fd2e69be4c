// Reading mpirun's account of a failed job (Open MPI 4.x wording), for run_launch and its tests.
#pragma once

#include <string>

namespace trainrun {

// The first rank failure Open MPI reports in `mpirun_stderr`, e.g. "rank 1 on node7 killed by
// signal 9 (Killed)" or "rank 1 exited with code 3"; empty when it names none.
std::string describe_mpirun_failure(const std::string& mpirun_stderr);

}  // namespace trainrun
