// Stop requests from signals: SIGINT stops cleanly; SIGTERM and SIGUSR1 (what Slurm sends before
// a time limit or preemption) checkpoint at the next step boundary and exit "resume me".
#pragma once

namespace trainrun {

// Blocks SIGINT, SIGTERM and SIGUSR1 in the calling thread and every thread started after it,
// and receives them on a dedicated thread. Call it first, before any other thread exists.
void install_stop_signals();
// 0 when no stop was requested, else the first signal number received.
int stop_signal();

}  // namespace trainrun
