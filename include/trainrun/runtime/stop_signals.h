// Stop requests from signals: SIGINT stops cleanly; SIGTERM and SIGUSR1 (what Slurm sends before
// a time limit or preemption) checkpoint at the next step boundary and exit "resume me". A
// SIGINT after any stop request ends the process at once with 130, without a checkpoint. In a
// rank a trainrun launched (TRAINRUN_LAUNCHED_BY=trainrun), SIGUSR2 is SIGINT: the launcher
// relays SIGINT that way. Before the step loop begins (setup: reading and scanning data,
// building the model, restoring a checkpoint) there is no state worth a checkpoint, and setup
// has no step boundary to wait for: a stop request then ends the process at once, with 75 or
// 130, saying so.
#pragma once

namespace trainrun {

// Blocks the stop signals in the calling thread and every thread started after it, and
// receives them on a dedicated thread. Call it first, before any other thread exists (run_command
// does, in every process that runs the trainer; later calls do nothing). Not in a launching
// trainrun: its StopRelay relays these signals to the job instead.
void install_stop_signals();
// 0 when no stop was requested, else the first signal number received (SIGINT for SIGUSR2).
int stop_signal();
// Setup is over: from now on the step loop takes stop requests (at the next step boundary, or
// between evaluation batches) instead of the signal thread ending the process. Thread safe.
void enter_step_loop();

}  // namespace trainrun
