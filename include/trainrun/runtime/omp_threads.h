// How many OpenMP threads a training process runs: the default per rank, and the bound on what
// --threads or OMP_NUM_THREADS may ask for.
#pragma once

namespace trainrun {

// OpenMP threads for this rank: cores / local ranks, at least 1 (OMP_NUM_THREADS wins).
int default_omp_threads(int local_size);

// The most OpenMP threads one trainrun process runs, whether --threads or OMP_NUM_THREADS asks:
// each thread holds its own stack and buffers, and libgomp crashed (SIGSEGV, silently) starting
// 100000 of them, and spent minutes on 20000.
inline constexpr int kMaxThreads = 1024;

// OMP_NUM_THREADS, when set, must be thread counts from 1 to kMaxThreads (a list, "8,4", for
// nested levels): otherwise ConfigError (exit 2) naming the variable, its value and the bound.
// Checked before any command runs: OpenMP starts its threads at the first parallel region.
void check_omp_num_threads();

}  // namespace trainrun
