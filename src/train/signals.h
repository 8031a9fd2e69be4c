// Stop requests from signals: SIGINT stops cleanly; SIGTERM and SIGUSR1 (what Slurm sends before
// a time limit or preemption) checkpoint at the next step boundary and exit "resume me". A
// SIGINT after any stop request ends the process at once with 130, without a checkpoint. In a
// rank a trainrun launched (TRAINRUN_LAUNCHED_BY=trainrun), SIGUSR2 is SIGINT: the launcher
// relays SIGINT that way.
#pragma once

namespace trainrun {

// Blocks the stop signals in the calling thread and every thread started after it, and
// receives them on a dedicated thread. Call it first, before any other thread exists.
void install_stop_signals();
// 0 when no stop was requested, else the first signal number received (SIGINT for SIGUSR2).
int stop_signal();

}  // namespace trainrun
