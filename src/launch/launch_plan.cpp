// The mpirun command that starts a job's ranks, built from the experiment.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "host.h"
#include "trainrun/errors.h"
#include "trainrun/launch.h"

extern char** environ;

namespace trainrun {
namespace {

std::string where(const Experiment& exp) {
  return exp.source_path.empty() ? std::string() : fmt::format(" (in {})", exp.source_path);
}

// Names of TRAINRUN_* variables set here (fault injection, test hooks): ranks on other nodes
// only see what mpirun is told to forward.
std::vector<std::string> trainrun_variables() {
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || std::strncmp(*e, "TRAINRUN_", 9) != 0) continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (name != "TRAINRUN_LAUNCHED_BY") names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

LaunchPlan plan_launch(const Experiment& exp, const std::vector<std::string>& self_argv) {
  const DistributedConfig& d = exp.distributed;
  if (d.nproc < 1 || d.nodes < 1)
    throw LaunchError(
        fmt::format("distributed.nproc={} and distributed.nodes={}{}: both must be at least 1",
                    d.nproc, d.nodes, where(exp)));
  if (self_argv.empty()) throw std::invalid_argument("plan_launch: empty command for the ranks");

  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty())
    throw LaunchError(fmt::format(
        "{} ranks requested (distributed.nproc={} x distributed.nodes={}) but mpirun is not on "
        "PATH: install openmpi-bin (apt-get install openmpi-bin) or run ranks yourself with srun",
        exp.world_size(), d.nproc, d.nodes));
  if (!d.hostfile.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(d.hostfile, ec))
      throw LaunchError(
          fmt::format("distributed.hostfile: {} is not a file{}; fix the path or "
                      "remove the key to run on this node",
                      d.hostfile, where(exp)));
  }
  const int world = exp.world_size();
  if (d.nodes == 1 && d.hostfile.empty() && !d.oversubscribe) {
    const int cores = available_cores();
    if (world > cores)
      throw LaunchError(fmt::format(
          "distributed.nproc={} ranks on this node, but it has {} cores and mpirun gives each "
          "rank a core{}: add `--set distributed.oversubscribe=true` to share cores (slower), "
          "or lower distributed.nproc",
          world, cores, where(exp)));
  }

  LaunchPlan plan;
  plan.omp_threads_per_rank = default_omp_threads(d.nproc);
  std::vector<std::string>& a = plan.argv;
  a = {mpirun, "-np", std::to_string(world)};
  if (!d.hostfile.empty()) a.insert(a.end(), {"--hostfile", d.hostfile});
  if (d.nodes > 1) a.insert(a.end(), {"--map-by", fmt::format("ppr:{}:node", d.nproc)});
  // mpirun's default binds each rank to one core, which leaves an OpenMP rank one thread.
  a.insert(a.end(), {"--bind-to", "none"});
  if (d.oversubscribe) a.push_back("--oversubscribe");
  a.insert(a.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", plan.omp_threads_per_rank)});
  a.insert(a.end(), {"-x", "TRAINRUN_LAUNCHED_BY=trainrun"});
  for (const char* name : {"PATH", "LD_LIBRARY_PATH"})
    if (std::getenv(name)) a.insert(a.end(), {"-x", name});
  for (const std::string& name : trainrun_variables()) a.insert(a.end(), {"-x", name});
  a.insert(a.end(), exp.launcher.mpirun_args.begin(), exp.launcher.mpirun_args.end());
  a.insert(a.end(), self_argv.begin(), self_argv.end());

  // Open MPI refuses to run as root without both of these (or --allow-run-as-root).
  if (geteuid() == 0) plan.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  return plan;
}

namespace {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789_@%+=:,./-") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q += "'\\''";
    else
      q += c;
  }
  return q + "'";
}

}  // namespace

std::string render_command(const LaunchPlan& plan) {
  std::string out;
  for (const std::string& kv : plan.env) {
    size_t eq = kv.find('=');
    out += eq == std::string::npos ? shell_quote(kv)
                                   : kv.substr(0, eq + 1) + shell_quote(kv.substr(eq + 1));
    out += ' ';
  }
  for (size_t i = 0; i < plan.argv.size(); ++i) {
    if (i) out += ' ';
    out += shell_quote(plan.argv[i]);
  }
  return out;
}

}  // namespace trainrun
