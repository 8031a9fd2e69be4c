// The launch's start-up bound and the stop signals that come before any rank is up.
#include "start_bound.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>

#include "process_tree.h"
#include "stop_relay.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/runtime/heartbeats.h"

namespace trainrun {
namespace {

// How long the killed processes get to disappear: SIGKILL is not delayed, except by a process
// in uninterruptible sleep (a hung file system), which nothing can end sooner.
constexpr double kReapWait = 5;

}  // namespace

StartBound::StartBound(const LaunchPlan& plan)
    : run_dir_(plan.run_dir),
      timeout_(plan.launch_timeout),
      active_(!plan.run_dir.empty() && !plan.single_rank),
      start_(now()) {}

void StartBound::enforce(pid_t pid) {
  if (!active_ || killed_) return;
  const double t = now();
  if (kill_at_ < 0) {
    if (started_) return;
    // A directory scan 4 times a second until the first beat, and at once when a stop comes:
    // a short run can start, finish and be signalled between two scans, and a stop must not
    // be taken for one before any rank started.
    if (t - last_look_ >= 0.25 || StopRelay::requested() != 0) {
      last_look_ = t;
      started_ = any_heartbeat(run_dir_);
      if (started_) return;
    }
    decide(pid, t);
    if (kill_at_ < 0) return;
  }
  if (StopRelay::interrupts() >= 2) kill_at_ = t;  // a second SIGINT means now
  if (t < kill_at_) return;
  killed_ = true;
  const std::vector<pid_t> left = kill_process_tree(pid, kReapWait);
  if (!left.empty())
    fmt::print(stderr,
               "warning: {} process(es) of the launch (pid {} first) did not end within {:g} s "
               "of SIGKILL (uninterruptible sleep: a hung file system?)\n",
               left.size(), left.front(), kReapWait);
}

void StartBound::decide(pid_t pid, double t) {
  if (const int sig = StopRelay::requested(); sig != 0) {
    code_ = StopRelay::stop_code();
    kill_at_ = t + kGrace;
    fmt::print(stderr,
               "stop requested (signal {}) during the launch, before any rank started: nothing "
               "to checkpoint, the run's checkpoints stay as they were; ending mpirun and what "
               "it started\n",
               sig);
    return;
  }
  if (timeout_ <= 0 || t - start_ < timeout_) return;
  timed_out_ = true;
  code_ = kExitLaunch;
  why_ = fmt::format(
      "mpirun started no rank within {:g} s (fault_tolerance.launch_timeout): the launch "
      "hangs, so trainrun ended mpirun and what it started. A known cause: something listening "
      "on 127.0.0.1:6000-6009 (TensorBoard's 6006) makes hwloc's GL probe wait for an X server "
      "for ever; trainrun avoids it with HWLOC_COMPONENTS=-gl unless your HWLOC_COMPONENTS "
      "names gl (remove that, or stop the listener). Others: a host of the hostfile that ssh "
      "cannot reach, a file system the ranks hang on. A launch that is only slow (thousands of "
      "ranks, a huge checkpoint to read first) needs a larger fault_tolerance.launch_timeout",
      timeout_);
  kill(pid, SIGTERM);
  kill_at_ = t + kGrace;
}

}  // namespace trainrun
