// Is this process one rank of a job somebody else started? Decided from the environment the
// starter leaves behind, before MPI is initialised (the launcher must not initialise MPI).
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainrun/runtime/rank_env.h"

namespace trainrun {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Parses a non-negative decimal integer; false on anything else.
bool parse_u64(const char* s, uint64_t* out) {
  if (!s || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

bool env_int(const char* name, int* out) {
  uint64_t v;
  if (!parse_u64(env(name), &v) || v > INT32_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

// Slurm's compressed per-node task counts, "2(x3),1" = 2,2,2,1: the count of node `node`.
int tasks_on_node(const char* spec, int node) {
  if (!spec) return 0;
  std::string s = spec;
  size_t pos = 0;
  int index = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int count = std::atoi(item.c_str());
    int repeat = 1;
    if (size_t x = item.find("(x"); x != std::string::npos)
      repeat = std::atoi(item.c_str() + x + 2);
    if (node < index + repeat) return count;
    index += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return 0;
}

// Slurm numbers special steps near 2^32 (batch script, extern, interactive): those are not
// ranks. Normal steps are at most SLURM_MAX_NORMAL_STEP_ID (0xfffffff0).
bool in_slurm_job_step() {
  uint64_t step;
  return parse_u64(env("SLURM_STEP_ID"), &step) && step <= 0xfffffff0ull;
}

}  // namespace

Restarts detect_restarts() {
  Restarts r;
  if (std::getenv(kRestartCountVar)) {
    r.by_supervisor = true;
    env_int(kRestartCountVar, &r.count);
  } else {
    env_int("SLURM_RESTART_COUNT", &r.count);
  }
  return r;
}

RankEnv detect_rank_env() {
  RankEnv e;
  // Open MPI's mpirun (also when run inside a Slurm allocation, whose SLURM_* variables the
  // ranks inherit, so it is checked first): OMPI_COMM_WORLD_{SIZE,RANK,LOCAL_RANK,LOCAL_SIZE}.
  if (env_int("OMPI_COMM_WORLD_SIZE", &e.size) && env_int("OMPI_COMM_WORLD_RANK", &e.rank)) {
    e.is_rank = true;
    e.launcher = "openmpi";
    if (!env_int("OMPI_COMM_WORLD_LOCAL_RANK", &e.local_rank)) e.local_rank = 0;
    if (!env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &e.local_size)) e.local_size = 1;
    return e;
  }
  // Slurm srun: only inside a job step (SLURM_STEP_ID). sbatch's batch shell has SLURM_JOB_ID
  // and even SLURM_PROCID=0, but it is the launcher, not a rank. Reads SLURM_PROCID,
  // SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID, and the local size from
  // SLURM_STEP_TASKS_PER_NODE indexed by SLURM_NODEID (else SLURM_NTASKS_PER_NODE).
  if (in_slurm_job_step() && env_int("SLURM_PROCID", &e.rank)) {
    e.is_rank = true;
    e.launcher = "slurm";
    if (!env_int("SLURM_STEP_NUM_TASKS", &e.size) && !env_int("SLURM_NTASKS", &e.size))
      e.size = e.rank + 1;
    if (!env_int("SLURM_LOCALID", &e.local_rank)) e.local_rank = 0;
    int node = 0;
    env_int("SLURM_NODEID", &node);
    int local = tasks_on_node(env("SLURM_STEP_TASKS_PER_NODE"), node);
    if (local <= 0) local = tasks_on_node(env("SLURM_TASKS_PER_NODE"), node);
    if (local <= 0) env_int("SLURM_NTASKS_PER_NODE", &local);
    e.local_size = local > e.local_rank ? local : e.local_rank + 1;
    return e;
  }
  // PMI: MPICH's Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS) or a bare PMIx
  // server (PMIX_RANK; PMIx does not export the size, so size is 0 = "ask MPI").
  bool pmi = env_int("PMI_RANK", &e.rank);
  if (!pmi) pmi = env_int("PMIX_RANK", &e.rank);
  if (pmi) {
    e.is_rank = true;
    e.launcher = "pmi";
    if (!env_int("PMI_SIZE", &e.size)) e.size = 0;
    if (!env_int("MPI_LOCALRANKID", &e.local_rank)) e.local_rank = 0;
    if (!env_int("MPI_LOCALNRANKS", &e.local_size)) e.local_size = 1;
    return e;
  }
  return e;
}

}  // namespace trainrun
