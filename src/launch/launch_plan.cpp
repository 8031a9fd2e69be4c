// The mpirun command that starts a job's ranks, built from the experiment.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "host.h"
#include "trainrun/core/errors.h"
#include "trainrun/launch/launch.h"
#include "trainrun/runtime/host.h"
#include "trainrun/runtime/omp_threads.h"
#include "trainrun/runtime/omp_wait.h"

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

// The hostfile must exist and list distributed.nodes hosts: Open MPI's mapper would otherwise
// refuse the job only once it is launched (ppr:N:node maps N ranks on every host it lists).
void check_hostfile(const Experiment& exp) {
  const DistributedConfig& d = exp.distributed;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(d.hostfile, ec))
    throw LaunchError(fmt::format(
        "distributed.hostfile: {} is not a file{}; fix the path or remove the key to run on "
        "this node",
        d.hostfile, where(exp)));
  const std::vector<std::string> hosts = hostfile_hosts(d.hostfile);
  if (int(hosts.size()) != d.nodes)
    throw ConfigError(
        fmt::format("distributed.nodes={} but the hostfile {} lists {} host(s) ({}){}: set "
                    "distributed.nodes={} or list {} host(s) there",
                    d.nodes, d.hostfile, hosts.size(), fmt::join(hosts, ", "), where(exp),
                    hosts.size(), d.nodes));
}

// Open MPI's out-of-band channel (mpirun to its daemons) is plain TCP: a host that goes silent
// (link down, not a closed connection) is noticed only by TCP keepalive, which Open MPI leaves
// at 300 s idle + 9 x 20 s. Shorter here: a silent host is declared lost after at most
// kKeepaliveTime + kKeepaliveProbes x kKeepaliveIntvl = 25 s. A value the user gives in
// launcher.mpirun_args wins.
constexpr int kKeepaliveTime = 10, kKeepaliveIntvl = 5, kKeepaliveProbes = 3;

void add_keepalive(const Experiment& exp, std::vector<std::string>* argv) {
  const auto& user = exp.launcher.mpirun_args;
  for (auto [name, value] : {std::pair{"oob_tcp_keepalive_time", kKeepaliveTime},
                             std::pair{"oob_tcp_keepalive_intvl", kKeepaliveIntvl},
                             std::pair{"oob_tcp_keepalive_probes", kKeepaliveProbes}})
    if (std::find(user.begin(), user.end(), name) == user.end())
      argv->insert(argv->end(), {"--mca", name, std::to_string(value)});
}

}  // namespace

std::string no_gl_probe(const char* user) {
  const std::string mine = user ? user : "";
  if (mine.empty()) return "HWLOC_COMPONENTS=-gl";
  std::istringstream items(mine);
  for (std::string item; std::getline(items, item, ',');)
    if (item == "gl" || item == "-gl") return "HWLOC_COMPONENTS=" + mine;
  return "HWLOC_COMPONENTS=" + mine + ",-gl";
}

std::vector<std::string> hostfile_hosts(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> hosts;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (words >> host && std::find(hosts.begin(), hosts.end(), host) == hosts.end())
      hosts.push_back(host);
  }
  return hosts;
}

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
  if (!d.hostfile.empty()) check_hostfile(exp);
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
  plan.run_dir = exp.run_dir;
  plan.teardown_timeout = exp.fault_tolerance.teardown_timeout;
  plan.launch_timeout = exp.fault_tolerance.launch_timeout;
  plan.omp_threads_per_rank = default_omp_threads(d.nproc);
  std::vector<std::string>& a = plan.argv;
  a = {mpirun, "-np", std::to_string(world)};
  if (!d.hostfile.empty()) a.insert(a.end(), {"--hostfile", d.hostfile});
  if (d.nodes > 1) a.insert(a.end(), {"--map-by", fmt::format("ppr:{}:node", d.nproc)});
  // mpirun's default binds each rank to one core, which leaves an OpenMP rank one thread.
  a.insert(a.end(), {"--bind-to", "none"});
  if (d.oversubscribe) a.push_back("--oversubscribe");
  if (d.nodes > 1 || !d.hostfile.empty()) add_keepalive(exp, &a);
  a.insert(a.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", plan.omp_threads_per_rank)});
  for (const std::string& arg : omp_wait_mpirun_args(exp)) a.push_back(arg);
  a.insert(a.end(), {"-x", "TRAINRUN_LAUNCHED_BY=trainrun"});
  a.insert(a.end(), {"-x", "HWLOC_COMPONENTS"});  // ranks on other hosts too (no_gl_probe)
  for (const char* name : {"PATH", "LD_LIBRARY_PATH"})
    if (std::getenv(name)) a.insert(a.end(), {"-x", name});
  for (const std::string& name : trainrun_variables()) a.insert(a.end(), {"-x", name});
  a.insert(a.end(), exp.launcher.mpirun_args.begin(), exp.launcher.mpirun_args.end());
  a.insert(a.end(), self_argv.begin(), self_argv.end());

  // Open MPI refuses to run as root without both of these (or --allow-run-as-root).
  if (geteuid() == 0) plan.env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  plan.env.push_back(no_gl_probe(std::getenv("HWLOC_COMPONENTS")));
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
