// The ranks' heartbeat files, RUN_DIR/logs/heartbeat-rank-N. Each rank's watchdog rewrites its
// own every 0.5 s from just after MPI's start-up until the rank ends (train/watchdog.h); the
// watchdogs read each other's to name silent ranks, and the launcher takes the first one to
// appear as the sign that mpirun has started the job's ranks (launch.h, launch_timeout).
#pragma once

#include <string>

namespace trainrun {

// RUN_DIR/logs/heartbeat-rank-N
std::string heartbeat_path(const std::string& run_dir, int rank);
// Whether any rank's heartbeat file is there.
bool any_heartbeat(const std::string& run_dir);
// Removes every heartbeat-rank-* (and leftover temporaries): before each (re)launch, so that a
// rank killed in an earlier attempt does not pass for one of the new job's.
void clear_heartbeats(const std::string& run_dir);

}  // namespace trainrun
