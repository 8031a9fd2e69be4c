// Launch: the launcher builds the mpirun command (or one child rank's) and runs it.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/launch/mpirun_failure.h"

namespace trainrun {

struct LaunchPlan {
  std::vector<std::string> argv;  // the full mpirun command
  std::vector<std::string> env;   // KEY=VALUE added to mpirun's environment
  int omp_threads_per_rank = 1;
  // The command is one trainrun rank itself, not mpirun (a supervised single-rank job): its
  // failure is rank 0's, on this host.
  bool single_rank = false;
  // Once a rank of the job records a failure other than a stop (failure_record.h) in
  // run_dir, the job has failed: if mpirun has not ended teardown_timeout seconds later, the
  // launcher kills its process group. "" or 0: wait for mpirun however long it takes.
  std::string run_dir;
  double teardown_timeout = 0;
  // Until the first rank's heartbeat appears in run_dir (mpirun has started the ranks, they
  // are past MPI's start-up), the launch is bounded: after launch_timeout seconds (0: never),
  // or on a stop signal, mpirun and what it started on this host are ended, and run_launch
  // returns 6 (failure->not_launched) or the stop's 75/130. Not for single_rank.
  double launch_timeout = 0;
};

// self_argv: the trainrun command line the ranks run (argv[0] resolved to an absolute path).
// Throws LaunchError when mpirun is missing or ranks exceed slots without permission.
LaunchPlan plan_launch(const Experiment& exp, const std::vector<std::string>& self_argv);

// The HWLOC_COMPONENTS=... that mpirun and the ranks run with, given the user's value (null:
// unset). hwloc's GL component (libhwloc-plugins) looks for NVIDIA GPUs' X displays :0 to :9,
// and where nothing serves X but something listens on 127.0.0.1:6000+N (TensorBoard's 6006 is
// :6) it connects, sends X's greeting and waits for an answer for ever, before mpirun starts
// any rank. trainrun never uses what it finds (display names), so it is switched off: "-gl",
// or the user's list with ",-gl" appended. A list that names gl (or -gl) itself is the user's
// decision and is passed unchanged. The other I/O components (pci, opencl, cuda, nvml) probe
// devices, not sockets, and stay on: they describe the hardware the ranks run on.
std::string no_gl_probe(const char* user);

// A shell-quoted, copy-pasteable rendering (for --dry-run).
std::string render_command(const LaunchPlan& plan);

// Runs the plan and waits, relaying SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 to it as
// requests to checkpoint and stop (SIGUSR1 or SIGUSR2: see stop_relay.h). Returns the job's
// exit code (128+N when killed by signal N); when it is not 0, `failure` holds what mpirun said
// of the first rank to fail (rank and host when it named them), else what the exit status
// tells; when the launcher had to kill a job that would not tear down, it says so on stderr
// and the job's code is 128+9; a launch it ended before any rank started (launch_timeout, a
// stop) is 6 or 75/130, as LaunchPlan says. Not thread-safe: one launch per process at a time.
int run_launch(const LaunchPlan& plan, MpirunFailure* failure);
// The same, with failure's text only.
int run_launch(const LaunchPlan& plan, std::string* failure);

// The absolute path of this program (/proc/self/exe), or "trainrun" when unreadable: what the
// ranks and batch scripts run.
std::string self_executable();

}  // namespace trainrun
