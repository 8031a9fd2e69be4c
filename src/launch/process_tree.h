// Ending a process and everything it started on this host. mpirun puts each rank it starts in
// a process group of its own (measured: Open MPI 4.1), so killing mpirun's group leaves its
// ranks running; the launcher follows the parent links instead.
//
// Internal to src/launch. Linux only (reads /proc).
#pragma once

#include <sys/types.h>

#include <vector>

namespace trainrun {

// Every process descended from `root` (children, grandchildren, ...), from one scan of /proc.
std::vector<pid_t> descendants(pid_t root);

// Stops `root` and every process it started (SIGSTOP, scanning again until no new one appears,
// so none can start another meanwhile), then kills them all (SIGKILL, `root`'s process group
// too), and waits up to `wait_s` seconds for them to be gone (exited; a zombie counts as gone:
// `root`, our child, is left for the caller to reap). Returns the ones still there.
std::vector<pid_t> kill_process_tree(pid_t root, double wait_s);

}  // namespace trainrun
