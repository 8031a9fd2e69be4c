// The supervisor: the launching trainrun starts the job (mpirun, or one child rank), decides
// from the ranks' failure records (failure_record.h; mpirun's text only where a rank wrote
// none) how it ended and who caused it, and relaunches it from the newest good checkpoint when
// the code says a relaunch can help. Single-threaded; runs in the launching process only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/launch/mpirun_failure.h"
#include "trainrun/launch/run_command.h"
#include "trainrun/runtime/failure_record.h"

namespace trainrun {

// How a job ended.
struct JobOutcome {
  int code = 0;
  std::string cause;  // one line naming the rank, its host and what happened ("" when code 0)
  int rank = -1;      // the rank blamed; -1 when nobody could say
  std::string host;
  bool from_record = false;   // decided by a rank's own record rather than mpirun's text
  bool not_launched = false;  // mpirun could not start the job: no rank ran (MpirunFailure)
};

// The decision, from the launcher's exit code, the records the ranks left, and what mpirun
// said. In order: the earliest record of a failure (not a stop); else a launch that started no
// rank (launcher.not_launched: 6, whatever a rank caught starting recorded); else mpirun's
// report when it names a rank that wrote no record (it was killed, its host was lost); else
// the earliest stop record (75/130: every rank stopped on purpose, whatever mpirun's own
// code); else the launcher's code and words. The code is one of man trainrun's table
// (job_code).
JobOutcome judge_job(int launcher_code, const std::vector<FailureRecord>& records,
                     const MpirunFailure& launcher);

// A job's exit code as man trainrun documents it: trainrun's own codes and 128+N (killed by
// signal N) as they are; any other code (a rank's stray exit code, mpirun's own failures such
// as a lost host) is 6, a launch failure.
int job_code(int code);

// False for the codes a relaunch cannot fix, or that mean "done" or "stopped on purpose".
bool restartable(int code);

// What an exit code means, in a few words ("bad data", "stopped by SIGINT", ...).
std::string exit_code_meaning(int code);

// Runs the job and relaunches it as fault_tolerance asks; returns the final exit code. `claim`
// runs once, after the first launch command is known to be valid and before it starts: it
// takes the run directory (run_command.h). Stop signals become requests to the job
// (stop_relay.h); after one, the job is never relaunched. With request.dry_run, prints the
// first launch command instead (and claims nothing).
int supervise(const RunRequest& request, const Experiment& exp, std::string resume_file,
              const std::function<void()>& claim);

}  // namespace trainrun
