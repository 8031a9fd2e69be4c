// The launch, from mpirun's start to its first rank's heartbeat (heartbeats.h), is bounded and
// stoppable. Until a rank is up, nobody else can end the job: mpirun can block before it starts
// any rank (hwloc's GL probe waiting for an X server on 127.0.0.1:6000-6009 did, for ever), and
// a blocked mpirun takes no notice of the signals the relay sends it (stop_relay.h). So:
//
// - launch_timeout seconds without a heartbeat: mpirun gets SIGTERM (a working one tears its
//   job down, remote daemons included), then, kGrace later, it and everything it started on
//   this host are killed (process_tree.h). The job's code is 6, a launch failure.
// - a stop signal before a heartbeat: relayed as always (ranks still starting take it at once),
//   then after kGrace, or at once on a second SIGINT, the same kill; the code is the stop's
//   (75 or 130). Before the first step there is nothing to checkpoint.
//
// Once a heartbeat is seen, the bound stands aside: the relay and the ranks' watchdogs take
// over. Internal to src/launch; main thread only.
#pragma once

#include <sys/types.h>

#include <string>

#include "trainrun/launch/launch.h"

namespace trainrun {

class StartBound {
 public:
  // Seconds mpirun gets to end after the SIGTERM or the relayed stop, before the kill.
  static constexpr double kGrace = 3;

  // Inactive (never acts) without a run directory to watch, or for a single supervised rank
  // (no mpirun: the child is trainrun itself, which takes its signals from its first
  // instruction). Starts the clock.
  explicit StartBound(const LaunchPlan& plan);

  // Called every ~200 ms while mpirun (`pid`, leader of its own process group) runs.
  void enforce(pid_t pid);

  // Whether it ended the launch (mpirun may have ended by itself in the grace it was given);
  // then the job's code and, for a timeout, what to report.
  bool ended() const { return kill_at_ >= 0; }
  int code() const { return code_; }
  const std::string& why() const { return why_; }
  bool timed_out() const { return timed_out_; }
  // Whether it killed mpirun's process tree (rather than mpirun ending within its grace).
  bool killed() const { return killed_; }

 private:
  void decide(pid_t pid, double t);

  std::string run_dir_;
  double timeout_;
  bool active_;
  double start_, last_look_ = -1e9, kill_at_ = -1;
  bool started_ = false, killed_ = false, timed_out_ = false;
  int code_ = 0;
  std::string why_;
};

}  // namespace trainrun
