// The launching trainrun's stop signals while it runs a job. A stop request (SIGTERM, SIGHUP,
// SIGUSR1, SIGINT, SIGUSR2) must reach every rank as "checkpoint and stop", but mpirun answers
// SIGTERM and SIGINT by killing its ranks a second later (Open MPI's odls_base_sigkill_timeout),
// before they can checkpoint. So the relay sends the child what mpirun forwards to every rank
// unchanged: SIGUSR1 for SIGTERM, SIGHUP and SIGUSR1 (ranks stop with 75), SIGUSR2 for SIGINT
// and SIGUSR2 (ranks a trainrun started take it as SIGINT: they stop with 130, and a second one
// stops them at once, without a checkpoint). A third SIGINT ends the job the hard way: the
// child's `hard_stop` signal (SIGTERM to mpirun, which kills its ranks).
//
// Process-wide, for the launching process only. Instances nest (the supervisor holds one for
// the whole job, run_launch one per launch); the outermost installs and restores the handlers.
// The handler is async-signal-safe; the other members are for the main thread.
#pragma once

#include <sys/types.h>

#include <csignal>

namespace trainrun {

class StopRelay {
 public:
  StopRelay();
  ~StopRelay();
  StopRelay(const StopRelay&) = delete;
  StopRelay& operator=(const StopRelay&) = delete;

  // The signals the relay handles.
  static const sigset_t& signals();
  // From now on relay to `pid` (0: nobody); `hard_stop` is what a third SIGINT sends it.
  static void set_child(pid_t pid, int hard_stop);
  // The first stop signal received (as received), 0 when none.
  static int requested();
  // How many SIGINT or SIGUSR2 have come (the second means "at once").
  static int interrupts();
  // The exit code that stop means: 130 for SIGINT or SIGUSR2, 75 for the others, 0 for none.
  static int stop_code();
  // Sleeps up to `seconds`; returns true at once when a stop has been requested.
  static bool sleep_unless_stopped(double seconds);
};

// What the relay sends the child for a stop signal `sig` received the `nth` time (1-based).
int relayed_signal(int sig, int nth, int hard_stop);

}  // namespace trainrun
