// Who this process is in its job, from the environment its starter left: a rank (started by
// mpirun, srun or a supervising trainrun) or not, and how often the job was relaunched.
#pragma once

#include <string>

namespace trainrun {

struct RankEnv {
  bool is_rank = false;  // started by mpirun/srun/PMI
  std::string launcher;  // "openmpi" | "slurm" | "pmi" | "" (none)
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
};
RankEnv detect_rank_env();

// How often this job was relaunched: by trainrun's supervisor, which sets kRestartCountVar on
// every rank (and has written the restart event into the metrics), or else by a Slurm requeue
// (SLURM_RESTART_COUNT). Read here and nowhere else.
inline constexpr const char* kRestartCountVar = "TRAINRUN_RESTART_COUNT";
struct Restarts {
  int count = 0;
  bool by_supervisor = false;
};
Restarts detect_restarts();

}  // namespace trainrun
