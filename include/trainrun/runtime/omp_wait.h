// How idle OpenMP threads wait. libgomp spins 300000 times at a barrier before it sleeps; when
// another process (or one of trainrun's own helper threads) holds a core, the spinning thread
// burns the time slice the descheduled one needs, and a step can take 10-50x longer instead of
// 2x. A bounded spin (train.omp_spincount, GOMP_SPINCOUNT) costs nothing measurable alone and
// keeps sharing graceful (bench/contention.sh, bench/RESULTS.md). libgomp reads the setting
// once, when it loads, so it must be in a process's environment before the process starts:
// the launcher passes it to the ranks, and a process that would train without it re-executes
// itself with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// "GOMP_SPINCOUNT=N" for the processes that train, or nothing when the environment already
// says how to wait (GOMP_SPINCOUNT or OMP_WAIT_POLICY: the user's choice wins) or the config
// asks for libgomp's default (-1).
std::optional<std::string> omp_wait_setting(const Experiment& exp);

// mpirun arguments that give every rank, on every host, the same wait policy: the user's
// variables forwarded by name, else -x GOMP_SPINCOUNT=N.
std::vector<std::string> omp_wait_mpirun_args(const Experiment& exp);

// For a process about to train: when omp_wait_setting applies and libgomp was loaded without
// it, sets it and re-executes this program with the same arguments (/proc/self/exe,
// /proc/self/cmdline); returns only when nothing needs doing. Call before anything is written
// or initialised (MPI included). The re-executed process takes back its name (ps, pkill) from
// argv[0].
void ensure_omp_wait_policy(const Experiment& exp);

}  // namespace trainrun
