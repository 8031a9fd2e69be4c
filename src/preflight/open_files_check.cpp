// The open-file check every process passes before it starts anything: the descriptors its role
// needs at this job's size against RLIMIT_NOFILE. A soft limit below the need is raised to the
// hard limit (as Go's runtime does at start), which children (mpirun, the node's ranks) inherit;
// a hard limit below it is an error that says how to raise it. Without this, a 16-rank job
// under `ulimit -n 64` left mpirun hanging until the launch bound (300 s), blamed on the wrong
// cause.
#include <fmt/format.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "trainrun/core/errors.h"
#include "trainrun/preflight/preflight.h"

namespace trainrun {

namespace {

// Measured on one node (docs/observability.md, "Limits"): mpirun held 49, 133 and 229
// descriptors for 8, 32 and 64 local ranks (stdio pipes and a PMIx socket per rank: 3-3.5 each),
// every rank 18 (rank 0: 21: its metrics and logs) whatever the job size, the launcher 7.
constexpr int64_t kBase = 32;         // a process's own files, with headroom
constexpr int64_t kPerLocalRank = 4;  // mpirun, per rank it starts on its node

}  // namespace

OpenFilesNeed open_files_need(const Experiment& exp, bool launcher) {
  if (launcher)
    return {kBase + kPerLocalRank * exp.distributed.nproc,
            fmt::format("mpirun with {} rank(s) on this node", exp.distributed.nproc),
            fmt::format("{} + {} per rank", kBase, kPerLocalRank)};
  // Open MPI's TCP transport may hold a socket to every other rank (rank 0 gathers from all);
  // shared memory and InfiniBand need none, so this is the worst case.
  const int64_t world = exp.world_size();
  return {kBase + world, fmt::format("each rank of {}", world),
          fmt::format("{} + a socket per rank, the worst case over TCP", kBase)};
}

void check_open_files(const OpenFilesNeed& need) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;  // unknown: nothing to compare against
  const auto fits = [&](rlim_t v) { return v == RLIM_INFINITY || v >= rlim_t(need.files); };
  if (fits(lim.rlim_cur)) return;
  if (fits(lim.rlim_max)) {
    const rlim_t soft = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) return;
    throw LaunchError(fmt::format(
        "{} needs about {} open files ({}), `ulimit -n` allows {} and raising it to the hard "
        "limit {} failed ({}); run `ulimit -n {}` before trainrun",
        need.who, need.files, need.sum, soft, lim.rlim_max, std::strerror(errno), need.files));
  }
  throw LaunchError(fmt::format(
      "{} needs about {} open files ({}), but the hard limit (`ulimit -Hn`) is {}: raise it "
      "to at least {} (as root: /etc/security/limits.conf, LimitNOFILE= for a systemd service, "
      "or Slurm's PropagateResourceLimits), or run fewer ranks per node",
      need.who, need.files, need.sum, lim.rlim_max, need.files));
}

}  // namespace trainrun
