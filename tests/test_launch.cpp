#include <doctest/doctest.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../src/launch/host.h"
#include "../src/launch/host_probe.h"
#include "../src/launch/process_tree.h"
#include "../src/launch/run_dir.h"
#include "../src/launch/start_bound.h"
#include "../src/launch/stop_relay.h"
#include "temp_dir.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/comm.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/launch/failure_record.h"
#include "trainrun/launch/heartbeats.h"
#include "trainrun/launch/launch.h"
#include "trainrun/launch/mpirun_failure.h"
#include "trainrun/launch/run_command.h"
#include "trainrun/launch/supervisor.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

// Sets/unsets environment variables for one test and restores them afterwards.
class EnvGuard {
 public:
  ~EnvGuard() {
    for (auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  void set(const std::string& name, const std::string& value) {
    save(name);
    setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    unsetenv(name.c_str());
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

void clear_rank_vars(EnvGuard& g) {
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID",
        "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "PMI_RANK",
        "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"})
    g.unset(v);
}

using trainrun::testing::TempDir;

Experiment experiment(int nproc, int nodes = 1) {
  Experiment e;
  e.distributed.nproc = nproc;
  e.distributed.nodes = nodes;
  return e;
}

const std::vector<std::string> kSelf = {"/opt/trainrun/bin/trainrun", "run", "my config.yaml"};

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
// True when `seq` occurs contiguously in v.
bool has_seq(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

bool mpirun_available() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t pos = 0;
  while (true) {
    size_t c = p.find(':', pos);
    std::string dir = p.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!dir.empty() && access((dir + "/mpirun").c_str(), X_OK) == 0) return true;
    if (c == std::string::npos) return false;
    pos = c + 1;
  }
}

int more_ranks_than_cores() {
  return static_cast<int>(std::thread::hardware_concurrency()) + 1;
}

}  // namespace

TEST_CASE("shard_of partitions [0, n) into near-equal contiguous ranges") {
  for (int w : {1, 2, 3, 7, 64}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1001}, int64_t{1} << 40}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < w; ++r) {
        Shard s = shard_of(n, w, r);
        CHECK(s.begin == next);
        CHECK(s.size() >= 0);
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
        next = s.end;
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  }
  CHECK(shard_of(1001, 2, 0).size() == 500);
  CHECK(shard_of(1001, 2, 1).begin == 500);
  CHECK(shard_of(1001, 2, 1).size() == 501);
  CHECK_THROWS_AS(shard_of(10, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(shard_of(10, 0, 0), std::invalid_argument);
}

TEST_CASE("local communicator: one rank, collectives are the identity") {
  auto c = make_local_communicator();
  CHECK(c->kind() == "local");
  CHECK(c->size() == 1);
  CHECK(c->rank() == 0);
  CHECK(c->local_size() == 1);
  CHECK_FALSE(c->host().empty());
  float x[3] = {1.5f, -2.0f, 3.0f};
  Tensor t(x, DType::f32, Device::cpu, {3});
  c->allreduce_sum(t);
  c->allreduce_avg(t);
  c->reduce_scatter_sum(t);
  c->all_gather(t);
  c->ireduce_scatter_sum(t)->wait();
  CHECK(c->iallreduce_sum(t)->test());
  CHECK(x[0] == 1.5f);
  CHECK(x[1] == -2.0f);
  const double in[2] = {4.0, 5.0};
  double out[2] = {0, 0};
  c->all_gather_doubles(in, 2, out);
  CHECK(out[0] == 4.0);
  CHECK(out[1] == 5.0);
  CHECK_THROWS_AS(c->broadcast(t, 1), std::invalid_argument);
}

TEST_CASE("detect_rank_env") {
  EnvGuard g;
  clear_rank_vars(g);

  SUBCASE("nothing set: the launcher, not a rank") {
    RankEnv e = detect_rank_env();
    CHECK_FALSE(e.is_rank);
    CHECK(e.launcher.empty());
    CHECK(e.size == 1);
  }
  SUBCASE("Open MPI's mpirun") {
    g.set("OMPI_COMM_WORLD_SIZE", "4");
    g.set("OMPI_COMM_WORLD_RANK", "3");
    g.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    g.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    g.set("SLURM_JOB_ID", "17");  // mpirun inside an allocation: still Open MPI's rank
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "openmpi");
    CHECK(e.rank == 3);
    CHECK(e.size == 4);
    CHECK(e.local_rank == 1);
    CHECK(e.local_size == 2);
  }
  SUBCASE("srun job step") {
    g.set("SLURM_JOB_ID", "17");
    g.set("SLURM_STEP_ID", "0");
    g.set("SLURM_PROCID", "5");
    g.set("SLURM_NTASKS", "6");
    g.set("SLURM_STEP_NUM_TASKS", "6");
    g.set("SLURM_LOCALID", "1");
    g.set("SLURM_NODEID", "2");
    g.set("SLURM_STEP_TASKS_PER_NODE", "2(x2),3");
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "slurm");
    CHECK(e.rank == 5);
    CHECK(e.size == 6);
    CHECK(e.local_rank == 1);
    CHECK(e.local_size == 3);
  }
  SUBCASE("sbatch's batch shell is not a rank") {
    g.set("SLURM_JOB_ID", "17");
    g.set("SLURM_PROCID", "0");
    g.set("SLURM_NTASKS", "4");
    g.set("SLURM_LOCALID", "0");
    CHECK_FALSE(detect_rank_env().is_rank);
    g.set("SLURM_STEP_ID", "4294967291");  // Slurm's id for the batch script itself
    CHECK_FALSE(detect_rank_env().is_rank);
  }
  SUBCASE("PMI (Hydra)") {
    g.set("PMI_RANK", "1");
    g.set("PMI_SIZE", "2");
    RankEnv e = detect_rank_env();
    CHECK(e.is_rank);
    CHECK(e.launcher == "pmi");
    CHECK(e.rank == 1);
    CHECK(e.size == 2);
  }
  SUBCASE("garbage is not a rank") {
    g.set("OMPI_COMM_WORLD_SIZE", "two");
    g.set("OMPI_COMM_WORLD_RANK", "1");
    CHECK_FALSE(detect_rank_env().is_rank);
  }
}

TEST_CASE("default_omp_threads") {
  EnvGuard g;
  g.set("OMP_NUM_THREADS", "3");
  CHECK(default_omp_threads(2) == 3);
  g.unset("OMP_NUM_THREADS");
  CHECK(default_omp_threads(1) >= 1);
  CHECK(default_omp_threads(1) <= static_cast<int>(std::thread::hardware_concurrency()));
  CHECK(default_omp_threads(100000) == 1);
}

TEST_CASE("plan_launch: the mpirun command") {
  if (!mpirun_available()) {
    MESSAGE("mpirun not on PATH: only the missing-mpirun error is testable here");
    CHECK_THROWS_AS(plan_launch(experiment(2), kSelf), LaunchError);
    return;
  }
  EnvGuard g;
  g.unset("OMP_NUM_THREADS");
  g.unset("HWLOC_COMPONENTS");

  SUBCASE("one node, 2 ranks") {
    LaunchPlan p = plan_launch(experiment(2), kSelf);
    REQUIRE(p.argv.size() > kSelf.size());
    CHECK(fs::path(p.argv[0]).filename() == "mpirun");
    CHECK(has_seq(p.argv, {"-np", "2"}));
    CHECK(has_seq(p.argv, {"--bind-to", "none"}));
    CHECK_FALSE(has(p.argv, "--oversubscribe"));
    CHECK_FALSE(has(p.argv, "--hostfile"));
    CHECK_FALSE(has(p.argv, "--map-by"));
    CHECK(has_seq(p.argv, {"-x", "TRAINRUN_LAUNCHED_BY=trainrun"}));
    CHECK(has_seq(p.argv, {"-x", "OMP_NUM_THREADS=" + std::to_string(p.omp_threads_per_rank)}));
    CHECK(has_seq(p.argv, {"-x", "PATH"}));
    CHECK(std::equal(kSelf.begin(), kSelf.end(), p.argv.end() - kSelf.size()));
    CHECK(p.omp_threads_per_rank == default_omp_threads(2));
    if (geteuid() == 0) {
      CHECK(has(p.env, "OMPI_ALLOW_RUN_AS_ROOT=1"));
      CHECK(has(p.env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"));
    }
    // hwloc's GL probe off for mpirun and every rank: it can block mpirun's start for ever.
    CHECK(has(p.env, "HWLOC_COMPONENTS=-gl"));
    CHECK(has_seq(p.argv, {"-x", "HWLOC_COMPONENTS"}));
    CHECK(p.launch_timeout == Experiment{}.fault_tolerance.launch_timeout);
  }
  SUBCASE("a user's HWLOC_COMPONENTS is kept, with gl off unless it names gl") {
    g.set("HWLOC_COMPONENTS", "-opencl");
    CHECK(has(plan_launch(experiment(2), kSelf).env, "HWLOC_COMPONENTS=-opencl,-gl"));
    CHECK(no_gl_probe(nullptr) == "HWLOC_COMPONENTS=-gl");
    CHECK(no_gl_probe("") == "HWLOC_COMPONENTS=-gl");
    CHECK(no_gl_probe("linux,x86") == "HWLOC_COMPONENTS=linux,x86,-gl");
    CHECK(no_gl_probe("gl,linux") == "HWLOC_COMPONENTS=gl,linux");  // asked for: theirs
    CHECK(no_gl_probe("-gl") == "HWLOC_COMPONENTS=-gl");
    CHECK(no_gl_probe("glx") == "HWLOC_COMPONENTS=glx,-gl");
  }
  SUBCASE("OMP_NUM_THREADS from the environment wins") {
    g.set("OMP_NUM_THREADS", "5");
    LaunchPlan p = plan_launch(experiment(2), kSelf);
    CHECK(p.omp_threads_per_rank == 5);
    CHECK(has_seq(p.argv, {"-x", "OMP_NUM_THREADS=5"}));
  }
  SUBCASE("more ranks than cores needs permission") {
    Experiment e = experiment(more_ranks_than_cores());
    e.source_path = "exp.yaml";
    try {
      plan_launch(e, kSelf);
      FAIL("expected LaunchError");
    } catch (const LaunchError& err) {
      const std::string what = err.what();
      CHECK(what.find("distributed.oversubscribe=true") != std::string::npos);
      CHECK(what.find(std::to_string(e.distributed.nproc)) != std::string::npos);
      CHECK(err.code() == kExitLaunch);
    }
    e.distributed.oversubscribe = true;
    LaunchPlan p = plan_launch(e, kSelf);
    CHECK(has(p.argv, "--oversubscribe"));
    CHECK(has_seq(p.argv, {"-np", std::to_string(e.distributed.nproc)}));
  }
  SUBCASE("hostfile and several nodes") {
    TempDir dir;
    const std::string hosts = (dir.path / "hosts").string();
    std::ofstream(hosts) << "node1 slots=4\nnode2 slots=4\n";
    Experiment e = experiment(4, 2);
    e.distributed.hostfile = hosts;
    LaunchPlan p = plan_launch(e, kSelf);
    CHECK(has_seq(p.argv, {"-np", "8"}));
    CHECK(has_seq(p.argv, {"--hostfile", hosts}));
    CHECK(has_seq(p.argv, {"--map-by", "ppr:4:node"}));
    e.distributed.hostfile = (dir.path / "missing").string();
    CHECK_THROWS_AS(plan_launch(e, kSelf), LaunchError);
  }
  SUBCASE("launcher.mpirun_args go verbatim right before the rank command") {
    Experiment e = experiment(2);
    e.launcher.mpirun_args = {"--mca", "btl", "self,vader"};
    LaunchPlan p = plan_launch(e, kSelf);
    const size_t at = p.argv.size() - kSelf.size() - 3;
    CHECK(p.argv[at] == "--mca");
    CHECK(p.argv[at + 1] == "btl");
    CHECK(p.argv[at + 2] == "self,vader");
  }
  SUBCASE("TRAINRUN_* variables are forwarded to the ranks") {
    g.set("TRAINRUN_FAULT_TEST_HOOK", "step=3");
    LaunchPlan p = plan_launch(experiment(2), kSelf);
    CHECK(has_seq(p.argv, {"-x", "TRAINRUN_FAULT_TEST_HOOK"}));
  }
  SUBCASE("mpirun missing names the fix") {
    TempDir empty;
    g.set("PATH", empty.path.string());
    try {
      plan_launch(experiment(2), kSelf);
      FAIL("expected LaunchError");
    } catch (const LaunchError& err) {
      CHECK(std::string(err.what()).find("openmpi-bin") != std::string::npos);
    }
  }
}

TEST_CASE("plan_launch: several hosts (keepalive, the hostfile's hosts)") {
  if (!mpirun_available()) {
    MESSAGE("mpirun not on PATH");
    return;
  }
  TempDir dir;
  const std::string hosts = (dir.path / "hosts").string();
  std::ofstream(hosts) << "# two nodes\nnode1 slots=4\n\nnode2 slots=4  # the second\nnode1\n";
  Experiment e = experiment(4, 2);
  e.distributed.hostfile = hosts;
  SUBCASE("a silent host is noticed by TCP keepalive within 25 s") {
    LaunchPlan p = plan_launch(e, kSelf);
    CHECK(has_seq(p.argv, {"--mca", "oob_tcp_keepalive_time", "10"}));
    CHECK(has_seq(p.argv, {"--mca", "oob_tcp_keepalive_intvl", "5"}));
    CHECK(has_seq(p.argv, {"--mca", "oob_tcp_keepalive_probes", "3"}));
    CHECK_FALSE(has(plan_launch(experiment(2), kSelf).argv, "oob_tcp_keepalive_time"));
  }
  SUBCASE("the user's own keepalive setting wins") {
    e.launcher.mpirun_args = {"--mca", "oob_tcp_keepalive_time", "60"};
    LaunchPlan p = plan_launch(e, kSelf);
    CHECK(std::count(p.argv.begin(), p.argv.end(), "oob_tcp_keepalive_time") == 1);
    CHECK(has_seq(p.argv, {"--mca", "oob_tcp_keepalive_time", "60"}));
    CHECK(has_seq(p.argv, {"--mca", "oob_tcp_keepalive_probes", "3"}));
  }
  SUBCASE("distributed.nodes that does not match the hostfile is a config error") {
    for (int nodes : {1, 3}) {
      CAPTURE(nodes);
      e.distributed.nodes = nodes;
      try {
        plan_launch(e, kSelf);
        FAIL("expected ConfigError");
      } catch (const ConfigError& err) {
        const std::string what = err.what();
        CHECK(err.code() == kExitUsage);
        CHECK(what.find(fmt::format("distributed.nodes={}", nodes)) != std::string::npos);
        CHECK(what.find("lists 2 host(s) (node1, node2)") != std::string::npos);
        CHECK(what.find(hosts) != std::string::npos);
      }
    }
  }
}

TEST_CASE("render_command is one copy-pasteable shell line") {
  LaunchPlan p;
  p.env = {"GREETING=hello world"};
  p.argv = {"/bin/sh", "-c",  "printf '[%s]' \"$@\" \"$GREETING\"", "sh", "a b", "it's", "$HOME",
            "",        "x=$y"};
  const std::string line = render_command(p);
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find("GREETING='hello world' /bin/sh -c ") == 0);
  // The shell must read back exactly the arguments and environment we meant.
  FILE* f = popen(line.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[512] = {};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  pclose(f);
  CHECK(std::string(buf, n) == "[a b][it's][$HOME][][x=$y][hello world]");
}

TEST_CASE("describe_mpirun_failure reads Open MPI 4.1's reports") {
  CHECK(describe_mpirun_failure("all good\n").empty());
  CHECK(describe_mpirun_failure(
            "-----\nmpirun detected that one or more processes exited with non-zero status, "
            "thus causing\nthe job to be terminated. The first process to do so was:\n\n"
            "  Process name: [[29619,1],1]\n  Exit code:    3\n-----\n") ==
        "rank 1 exited with code 3");
  CHECK(describe_mpirun_failure("mpirun noticed that process rank 1 with PID 0 on node vm "
                                "exited on signal 9 (Killed).\n") ==
        "rank 1 on vm killed by signal 9 (Killed)");
  CHECK(describe_mpirun_failure("MPI_ABORT was invoked on rank 2 in communicator "
                                "MPI_COMM_WORLD\nwith errorcode 5.\n\nNOTE: invoking") ==
        "rank 2 called MPI_Abort with code 5");
  CHECK(describe_mpirun_failure("mpirun has exited due to process rank 1 with PID 0 on\n"
                                "node n7 exiting improperly. There are three reasons") ==
        "rank 1 on n7 exited without finalizing MPI");
  CHECK(describe_mpirun_failure("could not access\nor execute an executable:\n\nExecutable: "
                                "./nope\nNode: vm\n") == "mpirun could not execute ./nope on vm");
  // The watchdog aborts on a duplicated communicator, whose name is several words.
  CHECK(describe_mpirun_failure("MPI_ABORT was invoked on rank 0 in communicator MPI COMMUNICATOR "
                                "3 DUP FROM 0\nwith errorcode 8.\n") ==
        "rank 0 called MPI_Abort with code 8");
  // The first report wins: later ones are usually consequences of it.
  CHECK(describe_mpirun_failure("mpirun noticed that process rank 3 with PID 0 on node a exited "
                                "on signal 11 (Segmentation fault).\n  Process name: "
                                "[[1,1],0]\n  Exit code:    1\n") ==
        "rank 3 on a killed by signal 11 (Segmentation fault)");
}

TEST_CASE("read_mpirun_failure names the rank and host as data") {
  MpirunFailure f = read_mpirun_failure(
      "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n");
  CHECK(f.rank == 1);
  CHECK(f.host == "vm");
  f = read_mpirun_failure("  Process name: [[29619,1],3]\n  Exit code:    3\n");
  CHECK(f.rank == 3);
  CHECK(f.host.empty());
  f = read_mpirun_failure("Executable: ./nope\nNode: vm\n");
  CHECK(f.rank == -1);
  CHECK(f.text.empty());
}

// Open MPI 4.1's words when a host cannot be reached at launch (ssh's line, then the box).
constexpr const char* kDaemonsNotStarted =
    "ssh: connect to host node2 port 22: No route to host\r\n"
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n"
    "This usually is caused by:\n\n"
    "* not finding the required libraries and/or binaries on\n"
    "  one or more nodes.\n"
    "--------------------------------------------------------------------------\n";

TEST_CASE("a job mpirun could not launch is a restartable launch failure, not a crash") {
  MpirunFailure f = read_mpirun_failure(kDaemonsNotStarted);
  CHECK(f.not_launched);
  CHECK(f.rank == -1);
  CHECK(f.host == "node2");
  CHECK(f.text.find("could not start its daemon on node2") != std::string::npos);
  f = read_mpirun_failure(
      "ssh: Could not resolve hostname nodex: Name or service not known\n"
      "An ORTE daemon has unexpectedly failed after launch and before\ncommunicating back to "
      "mpirun.\n");
  CHECK(f.not_launched);
  CHECK(f.host == "nodex");
  // A rank's exit is no launch failure, even with the same box further down.
  f = read_mpirun_failure(std::string("  Process name: [[29619,1],3]\n  Exit code:    3\n") +
                          kDaemonsNotStarted);
  CHECK_FALSE(f.not_launched);
  CHECK(f.rank == 3);

  JobOutcome o = judge_job(1, {}, read_mpirun_failure(kDaemonsNotStarted));
  CHECK(o.not_launched);
  CHECK(o.code == kExitLaunch);
  CHECK(o.host == "node2");
  CHECK(restartable(o.code));
  // Once a rank recorded a failure the job did start.
  FailureRecord r;
  r.rank = 0;
  r.culprit_rank = 0;
  r.exit_code = 3;
  r.cause = "error";
  CHECK_FALSE(judge_job(1, {r}, read_mpirun_failure(kDaemonsNotStarted)).not_launched);
}

// Real mpirun runs of /bin/sh ranks.
namespace {
std::string host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}
LaunchPlan sh_plan(const std::string& script) {
  return plan_launch(experiment(2), {"/bin/sh", "-c", script});
}
}  // namespace

TEST_CASE("run_launch supervises a real mpirun") {
  if (!mpirun_available()) {
    MESSAGE("mpirun not on PATH: run_launch is not testable here");
    return;
  }
  EnvGuard g;
  g.set("OMP_NUM_THREADS", "1");
  std::string failure = "stale";

  SUBCASE("success") {
    CHECK(run_launch(sh_plan("exit 0"), &failure) == 0);
    CHECK(failure.empty());
  }
  // Open MPI 4.1 now and then drops its report of which rank failed (the exit code stays
  // right): try a few times, and accept run_launch's fallback wording when it never comes.
  SUBCASE("a rank exits with an error code") {
    for (int attempt = 0; attempt < 3; ++attempt) {
      int code = run_launch(
          sh_plan("if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exit 3; fi; sleep 2"), &failure);
      CHECK(code == 3);
      if (failure == "rank 1 exited with code 3") break;
      CHECK(failure == "a rank exited with code 3; mpirun did not name it");
    }
  }
  SUBCASE("a rank is killed") {
    for (int attempt = 0; attempt < 3; ++attempt) {
      int code = run_launch(
          sh_plan("if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then kill -9 $$; fi; sleep 2"), &failure);
      CHECK(code == 128 + 9);
      if (failure == "rank 1 on " + host() + " killed by signal 9 (Killed)") break;
      CHECK(failure == "a rank was killed by signal 9 (Killed); mpirun did not name it");
    }
  }
  SUBCASE("SIGUSR1 to the launcher reaches the ranks") {
    TempDir dir;
    const std::string d = dir.path.string();
    // Each rank reports when its trap is set; the loop ends with 0 if no signal ever comes.
    const std::string script = "trap 'exit 7' USR1; touch " + d +
                               "/ready.$OMPI_COMM_WORLD_RANK; i=0; while [ $i -lt 300 ]; do "
                               "sleep 0.1; i=$((i+1)); done; exit 0";
    int code = -1;
    std::thread t([&] { code = run_launch(sh_plan(script), &failure); });
    for (int i = 0; i < 300 && !(fs::exists(d + "/ready.0") && fs::exists(d + "/ready.1")); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(getpid(), SIGUSR1);
    t.join();
    CHECK(code == 7);
  }
}

// --- Failure records ---------------------------------------------------------------------------

namespace {

FailureRecord record(int rank, int code, double time, const std::string& cause = "error") {
  FailureRecord r;
  r.rank = r.culprit_rank = rank;
  r.host = r.culprit_host = "host" + std::to_string(rank);
  r.pid = 1000 + rank;
  r.exit_code = code;
  r.cause = cause;
  r.message = "message of rank " + std::to_string(rank);
  r.phase = "forward";
  r.step = 6;
  r.time = time;
  return r;
}

// Runs `body` in a forked child (the rank side is process-wide) and returns its wait status.
template <typename Body>
int in_child(Body body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    std::_Exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("failure records: write, read back, clear") {
  TempDir dir;
  FailureRecord a = record(0, kExitData, 1712345678.125);
  a.message = "bad \"data\"\nin shard\t\x01 \xc3\xa9";  // quotes, control characters, UTF-8
  FailureRecord b = record(3, kExitHang, 1712345679.5, "watchdog");
  b.culprit_rank = 1;
  b.culprit_host = "host1";
  REQUIRE(write_failure_record(dir.str(), a));
  REQUIRE(write_failure_record(dir.str(), b));
  CHECK(fs::exists(dir / "logs/failure-rank-3.json"));
  CHECK(failure_record_path(dir.str(), 3) == dir / "logs/failure-rank-3.json");

  const std::vector<FailureRecord> back = read_failure_records(dir.str());
  REQUIRE(back.size() == 2);
  const FailureRecord& x = back[0];
  CHECK(x.rank == 0);
  CHECK(x.host == "host0");
  CHECK(x.pid == 1000);
  CHECK(x.exit_code == kExitData);
  CHECK(x.cause == "error");
  CHECK(x.message == a.message);
  CHECK(x.culprit_rank == 0);
  CHECK(x.phase == "forward");
  CHECK(x.step == 6);
  CHECK(x.time == 1712345678.125);
  CHECK(back[1].rank == 3);
  CHECK(back[1].culprit_rank == 1);
  CHECK(back[1].culprit_host == "host1");

  // Nothing but the records is left behind (the temporary files were renamed).
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "logs")) files += e.is_regular_file();
  CHECK(files == 2);

  // A torn record, a record under another rank's name and a stray file are skipped, not fatal.
  std::ofstream(dir / "logs/failure-rank-5.json") << "{\"kind\":\"failure\",\"rank\":5,\"ho";
  fs::copy_file(dir / "logs/failure-rank-0.json", dir / "logs/failure-rank-7.json");
  std::ofstream(dir / "logs/failure-rank-x.json") << "{}";
  std::ofstream(dir / "logs/.failure-rank-2.json.99.tmp") << "{";
  std::ofstream(dir / "logs/rank-0.log") << "keep me";
  CHECK(read_failure_records(dir.str()).size() == 2);

  clear_failure_records(dir.str());
  CHECK(read_failure_records(dir.str()).empty());
  CHECK(!fs::exists(dir / "logs/failure-rank-5.json"));
  CHECK(!fs::exists(dir / "logs/.failure-rank-2.json.99.tmp"));
  CHECK(fs::exists(dir / "logs/rank-0.log"));           // not ours to remove
  CHECK(fs::exists(dir / "logs/failure-rank-x.json"));  // not a record's name
  clear_failure_records(dir / "no-such-run");           // nothing there: no error
}

TEST_CASE("failure records: the rank side writes once, with its phase") {
  TempDir dir;
  const std::string run = dir.str();
  // A stale record of this rank goes when it arms; the first record of a process wins.
  REQUIRE(write_failure_record(run, record(2, kExitData, 1)));
  int status = in_child([&] {
    arm_failure_record(run, 2);
    if (!read_failure_records(run).empty()) std::_Exit(10);
    note_phase("backward", 41);
    record_failure(kExitHang, "watchdog", "stalled", 1, "hostB");
    record_failure(kExitFailure, "internal error", "a consequence");
  });
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::vector<FailureRecord> got = read_failure_records(run);
  REQUIRE(got.size() == 1);
  CHECK(got[0].rank == 2);
  CHECK(got[0].exit_code == kExitHang);
  CHECK(got[0].cause == "watchdog");
  CHECK(got[0].message == "stalled");
  CHECK(got[0].culprit_rank == 1);
  CHECK(got[0].culprit_host == "hostB");
  CHECK(got[0].host == host());
  CHECK(got[0].phase == "backward");
  CHECK(got[0].step == 41);
  CHECK(got[0].time > 1.6e9);

  // Not armed: nothing is written.
  clear_failure_records(run);
  status = in_child([] { record_failure(kExitData, "error", "nobody listens"); });
  CHECK(read_failure_records(run).empty());
}

TEST_CASE("failure records: a fatal signal leaves one and still ends the process") {
  TempDir dir;
  const std::string run = dir.str();
  const int status = in_child([&] {
    std::signal(SIGABRT, SIG_DFL);  // not doctest's crash report, inherited from the parent
    arm_failure_record(run, 1);
    note_phase("optimizer", 12);
    std::abort();
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  std::vector<FailureRecord> got = read_failure_records(run);
  REQUIRE(got.size() == 1);
  CHECK(got[0].rank == 1);
  CHECK(got[0].exit_code == 128 + SIGABRT);
  CHECK(got[0].cause == "signal");
  CHECK(got[0].message.find("signal 6") != std::string::npos);
  CHECK(got[0].phase == "optimizer");
  CHECK(got[0].step == 12);
  CHECK(got[0].culprit_rank == 1);
  CHECK(got[0].time > 1.6e9);
}

// --- The supervisor's decision -------------------------------------------------------------------

TEST_CASE("judge_job: records decide the code and the culprit; mpirun's text fills in") {
  const MpirunFailure none;
  const MpirunFailure killed1{"rank 1 on vm killed by signal 9 (Killed)", 1, "vm"};

  SUBCASE("a finished job is finished") {
    const JobOutcome o = judge_job(0, {record(1, kExitData, 5)}, killed1);
    CHECK(o.code == 0);
  }
  SUBCASE("one rank's error: its code, its name, no restart for bad data") {
    const JobOutcome o = judge_job(1, {record(1, kExitData, 5)}, none);
    CHECK(o.code == kExitData);
    CHECK(o.rank == 1);
    CHECK(o.host == "host1");
    CHECK(o.from_record);
    CHECK(o.cause.find("rank 1 on host1") != std::string::npos);
    CHECK(o.cause.find("message of rank 1") != std::string::npos);
    CHECK(o.cause.find("phase forward at step 6") != std::string::npos);
    CHECK_FALSE(restartable(o.code));
  }
  SUBCASE("the earliest failure wins over its consequences") {
    FailureRecord watchdog = record(0, kExitHang, 9, "watchdog");
    const JobOutcome o = judge_job(8, {watchdog, record(2, kExitFailure, 4)}, none);
    CHECK(o.code == kExitFailure);
    CHECK(o.rank == 2);
    CHECK(restartable(o.code));
  }
  SUBCASE("a watchdog names the rank that did not arrive, not itself") {
    FailureRecord w = record(0, kExitHang, 9, "watchdog");
    w.culprit_rank = 1;
    w.culprit_host = "host1";
    const JobOutcome o = judge_job(kExitHang, {w}, MpirunFailure{"rank 0 called MPI_Abort", 0, ""});
    CHECK(o.code == kExitHang);
    CHECK(o.rank == 1);
    CHECK(o.host == "host1");
    CHECK(o.cause.find("rank 1 on host1 was named by rank 0 on host0's watchdog") !=
          std::string::npos);
    CHECK(restartable(o.code));
  }
  SUBCASE("a fatal signal recorded by the rank is restartable") {
    const JobOutcome o = judge_job(1, {record(3, 128 + SIGSEGV, 2, "signal")}, none);
    CHECK(o.code == 128 + SIGSEGV);
    CHECK(o.rank == 3);
    CHECK(restartable(o.code));
  }
  SUBCASE("no record: mpirun's report names the rank (SIGKILL leaves none)") {
    const JobOutcome o = judge_job(137, {}, killed1);
    CHECK(o.code == 137);
    CHECK(o.rank == 1);
    CHECK(o.host == "vm");
    CHECK_FALSE(o.from_record);
    CHECK(o.cause == killed1.text);
  }
  SUBCASE("every rank stopped on purpose: 75, whatever mpirun's own code") {
    const MpirunFailure unnamed{"a rank exited with code 1; mpirun did not name it", -1, ""};
    const JobOutcome o = judge_job(
        1, {record(0, kExitResumeMe, 3, "stopped"), record(1, kExitResumeMe, 2)}, unnamed);
    CHECK(o.code == kExitResumeMe);
    CHECK(o.from_record);
    CHECK_FALSE(restartable(o.code));
    // mpirun naming a rank that itself recorded its stop does not turn the stop into a failure.
    const JobOutcome p = judge_job(75, {record(0, kExitInterrupted, 3, "stopped")},
                                   MpirunFailure{"rank 0 exited with code 130", 0, ""});
    CHECK(p.code == kExitInterrupted);
  }
  SUBCASE("a stop on one rank does not hide another rank's death") {
    const JobOutcome o = judge_job(137, {record(0, kExitResumeMe, 3, "stopped")}, killed1);
    CHECK(o.code == 137);
    CHECK(o.rank == 1);
  }
  SUBCASE("nothing known: the launcher's code and words") {
    JobOutcome o = judge_job(5, {}, none);
    CHECK(o.code == 5);
    CHECK(o.rank == -1);
    CHECK(o.cause == "the job exited with code 5");
    o = judge_job(1, {},
                  MpirunFailure{"a rank exited with code 1; mpirun did not name it", -1, ""});
    CHECK(o.cause == "a rank exited with code 1; mpirun did not name it");
  }
}

TEST_CASE("restartable and exit_code_meaning cover every exit code") {
  for (int code : {kExitOk, kExitUsage, kExitData, kExitCheckpoint, kExitDevice, kExitGaveUp,
                   kExitResumeMe, kExitInterrupted})
    CHECK_FALSE(restartable(code));
  for (int code :
       std::vector<int>{kExitFailure, kExitLaunch, kExitHang, 9, 128 + SIGKILL, 128 + SIGSEGV})
    CHECK(restartable(code));
  CHECK(exit_code_meaning(kExitHang) == "the watchdog aborted a hang");
  CHECK(exit_code_meaning(kExitResumeMe).find("SIGTERM") != std::string::npos);
  CHECK(exit_code_meaning(128 + 9) == "killed by signal 9");
  CHECK(exit_code_meaning(42) == "exit code 42");
}

// --- Resume resolution ---------------------------------------------------------------------------

namespace {

std::string write_config(const TempDir& dir, const std::string& run_dir) {
  const std::string path = dir / "exp.yaml";
  std::ofstream(path) << "name: resume-test\nrun_dir: " << run_dir
                      << "\ntrain:\n  steps: 10\ndata:\n  synthetic: markov\n";
  return path;
}

// A checkpoint of `exp` at `step`: one small tensor, the resolved config inside.
std::string save_checkpoint(const Experiment& exp, int64_t step) {
  CheckpointData d;
  d.state.step = step;
  d.state.config_yaml = to_yaml(exp);
  d.params.push_back({"w", {2, 3}, 0});
  d.weights.assign(6, 0.5f);
  d.adam_m.assign(6, 0.0f);
  d.adam_v.assign(6, 0.0f);
  const std::string path = checkpoint_path(exp.run_dir, step);
  fs::create_directories(fs::path(path).parent_path());
  write_checkpoint(path, d);
  return path;
}

}  // namespace

TEST_CASE("resolve_run: a config, or what --resume points at") {
  TempDir dir;
  const std::string run_dir = dir / "run";
  RunRequest r;

  SUBCASE("nothing to run") {
    CHECK_THROWS_AS(resolve_run(r), ConfigError);
    r.resume = "";
    CHECK_THROWS_AS(resolve_run(r), ConfigError);  // --resume without a value or a config
  }
  SUBCASE("a fresh run from a config; --run-dir wins") {
    r.config = write_config(dir, run_dir);
    auto [exp, file, step, use, notes] = resolve_run(r);
    CHECK(exp.name == "resume-test");
    CHECK(exp.run_dir == run_dir);
    CHECK(file.empty());
    r.run_dir = dir / "elsewhere";
    CHECK(resolve_run(r).exp.run_dir == dir / "elsewhere");
  }
  SUBCASE("--resume of a path that is not there") {
    r.resume = dir / "nope";
    CHECK_THROWS_AS(resolve_run(r), CheckpointError);
  }
  SUBCASE("a run directory without a checkpoint: refused alone, started with its config") {
    fs::create_directories(run_dir);
    r.resume = run_dir;
    CHECK_THROWS_AS(resolve_run(r), CheckpointError);
    r.config = write_config(dir, run_dir);
    r.resume = "";  // `trainrun CONFIG --resume`: the config's run directory
    auto [exp, file, step, use, notes] = resolve_run(r);
    CHECK(file.empty());
    CHECK(exp.run_dir == run_dir);
  }
  SUBCASE("a run directory: its newest good checkpoint and the config stored in it") {
    r.config = write_config(dir, run_dir);
    const Experiment original = resolve_run(r).exp;
    save_checkpoint(original, 4);
    const std::string newest = save_checkpoint(original, 8);
    RunRequest resume;
    resume.resume = run_dir;
    resume.sets = {"train.steps=20"};
    auto [exp, file, step, use, notes] = resolve_run(resume);
    CHECK(file == newest);
    CHECK(exp.name == "resume-test");
    CHECK(exp.train.steps == 20);
    CHECK(fs::equivalent(exp.run_dir, run_dir));
    // A damaged newest checkpoint is passed over for the one before it.
    std::ofstream(newest, std::ios::trunc) << "not hdf5";
    CHECK(resolve_run(resume).resume_file == checkpoint_path(run_dir, 4));
  }
  SUBCASE("a checkpoint file: that file; the run directory is the one holding it") {
    r.config = write_config(dir, run_dir);
    const std::string file = save_checkpoint(resolve_run(r).exp, 4);
    RunRequest resume;
    resume.resume = file;
    auto [exp, got, step, use, notes] = resolve_run(resume);
    CHECK(got == file);
    CHECK(fs::equivalent(exp.run_dir, run_dir));
    resume.run_dir = dir / "other";
    CHECK(resolve_run(resume).exp.run_dir == dir / "other");
    // A damaged file given by name is an error, not a silent fresh start.
    std::ofstream(file, std::ios::trunc) << "not hdf5";
    CHECK_THROWS_AS(resolve_run(resume), CheckpointError);
  }
}

TEST_CASE("check_memory refuses what cannot fit, with the numbers") {
  Experiment small;
  CHECK_NOTHROW(check_memory(small));
  Experiment huge;
  huge.model.d_model = 8192;
  huge.model.n_layer = 48;
  huge.model.n_head = 64;
  huge.model.vocab_size = 50304;
  try {
    check_memory(huge);
    FAIL("a 39-billion-parameter model fits?");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("GiB per rank") != std::string::npos);
    CHECK(what.find("this machine") != std::string::npos);
    CHECK(what.find("trainrun plan") != std::string::npos);
  }
}

// --- The run directory: one run, one process
// ------------------------------------------------------

namespace {

void touch(const fs::path& p, const std::string& text = "x") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RunDirError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("inspect_run_dir tells trainrun's directories from a user's") {
  TempDir dir;
  CHECK(inspect_run_dir(dir / "nope").kind == RunDirKind::missing);
  fs::create_directories(dir / "empty");
  CHECK(inspect_run_dir(dir / "empty").kind == RunDirKind::empty);
  touch(dir.path / "failed" / "config.yaml");
  touch(dir.path / "failed" / "logs" / "rank-0.log");
  CHECK(inspect_run_dir(dir / "failed").kind == RunDirKind::unused);
  touch(dir.path / "ran" / "metrics.jsonl");
  CHECK(inspect_run_dir(dir / "ran").kind == RunDirKind::run);
  Experiment e;
  e.run_dir = dir / "ckpt";
  save_checkpoint(e, 40);
  const RunDirState ran = inspect_run_dir(dir / "ckpt");
  CHECK(ran.kind == RunDirKind::run);
  CHECK(ran.what == "checkpoints up to step 40");
  // A user's files, even beside a config.yaml: not trainrun's.
  touch(dir.path / "mine" / "config.yaml");
  CHECK(inspect_run_dir(dir / "mine").kind == RunDirKind::foreign);
  touch(dir.path / "mine" / "notes.txt");
  touch(dir.path / "mine" / "logs" / "x");
  const RunDirState mine = inspect_run_dir(dir / "mine");
  CHECK(mine.kind == RunDirKind::foreign);
  CHECK(mine.what == "notes.txt");
  touch(dir / "afile");
  CHECK(error_of([&] { inspect_run_dir(dir / "afile"); }).find("is a file") != std::string::npos);
}

TEST_CASE("check_run_dir_use: a new run never lands on another run or a user's files") {
  const RunDirState run{RunDirKind::run, "checkpoints up to step 8"};
  const RunDirState foreign{RunDirKind::foreign, "notes.txt"};
  for (RunDirKind ok : {RunDirKind::missing, RunDirKind::empty, RunDirKind::unused})
    CHECK_NOTHROW(check_run_dir_use("d", {ok, ""}, RunDirUse::start, false));
  const std::string taken = error_of([&] { check_run_dir_use("d", run, RunDirUse::start, false); });
  CHECK(taken.find("already holds a run (checkpoints up to step 8)") != std::string::npos);
  CHECK(taken.find("--resume d") != std::string::npos);
  CHECK(taken.find("--new") != std::string::npos);
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::start, true));
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::restart, false));  // a requeued job
  CHECK_NOTHROW(check_run_dir_use("d", run, RunDirUse::resume, false));
  const std::string user =
      error_of([&] { check_run_dir_use("d", foreign, RunDirUse::start, false); });
  CHECK(user.find("trainrun did not make it (it holds notes.txt)") != std::string::npos);
  CHECK_FALSE(
      error_of([&] { check_run_dir_use("d", foreign, RunDirUse::restart, false); }).empty());
  CHECK_NOTHROW(check_run_dir_use("d", foreign, RunDirUse::start, true));
}

TEST_CASE("RunDirLock: one holder at a time, named; the kernel releases a dead holder's") {
  TempDir dir;
  const std::string d = dir / "run";
  {
    RunDirLock lock = RunDirLock::take(d);  // creates the directory
    CHECK(lock.held());
    CHECK(fs::is_directory(d));
    const std::string holder = run_dir_lock_holder(d);
    CHECK(holder.find(fmt::format("pid {} on ", getpid())) != std::string::npos);
    // A second open file description conflicts, in this process as in any other.
    const std::string second = error_of([&] { RunDirLock::take(d); });
    CHECK(second.find("in use by another trainrun: pid " + std::to_string(getpid())) !=
          std::string::npos);
    // --dry-run says what a real run would meet and refuses nothing.
    const std::string said = run_dir_objection(d, RunDirUse::resume, false);
    CHECK(said.find("in use by another trainrun") != std::string::npos);
    RunDirLock moved = std::move(lock);
    CHECK(moved.held());
    CHECK_FALSE(lock.held());
    CHECK_FALSE(run_dir_lock_holder(d).empty());
  }
  CHECK(run_dir_lock_holder(d).empty());
  // A holder killed with SIGKILL leaves the lock file, not the lock.
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  if (child == 0) {
    RunDirLock held = RunDirLock::take(d);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) std::_Exit(1);
    pause();
    std::_Exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  CHECK(run_dir_lock_holder(d).find(fmt::format("pid {} on ", child)) != std::string::npos);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  CHECK(run_dir_lock_holder(d).empty());
  CHECK(RunDirLock::take(d).held());
}

TEST_CASE("RunDirLock: unusable directories say why") {
  TempDir dir;
  touch(dir / "afile");
  CHECK(error_of([&] { RunDirLock::take(dir / "afile"); }).find("is a file") != std::string::npos);
  CHECK(error_of([&] { RunDirLock::take(dir.path / "afile" / "run"); }).find("is a file") !=
        std::string::npos);
  const std::string long_name = dir / std::string(300, 'x');
  CHECK(error_of([&] { RunDirLock::take(long_name); }).find("longer than the file system") !=
        std::string::npos);
}

TEST_CASE("claim_run_dir --new archives trainrun's files only; the lock file stays") {
  TempDir dir;
  const std::string d = dir / "run";
  Experiment e;
  e.run_dir = d;
  save_checkpoint(e, 4);
  touch(fs::path(d) / "config.yaml", "old");
  touch(fs::path(d) / "metrics.jsonl");
  touch(fs::path(d) / "slurm-17.out");
  touch(fs::path(d) / "notes.txt", "mine");
  CHECK_THROWS_AS(claim_run_dir(d, RunDirUse::start, false), RunDirError);
  CHECK(fs::exists(fs::path(d) / "config.yaml"));  // refused before anything moved
  CHECK_FALSE(fs::exists(fs::path(d) / kRunDirLockFile));
  {
    RunDirLock lock = claim_run_dir(d, RunDirUse::start, true);
    CHECK(lock.held());
  }
  std::vector<std::string> archives;
  for (const auto& entry : fs::directory_iterator(d))
    if (entry.path().filename().string().rfind("archive-", 0) == 0)
      archives.push_back(entry.path().string());
  REQUIRE(archives.size() == 1);
  const fs::path a = archives[0];
  CHECK(fs::exists(a / "checkpoints" / "step-0000004.h5"));
  CHECK(fs::exists(a / "config.yaml"));
  CHECK(fs::exists(a / "metrics.jsonl"));
  CHECK(fs::exists(a / "slurm-17.out"));
  CHECK(fs::exists(fs::path(d) / "notes.txt"));  // the user's file stays where it was
  CHECK(fs::exists(fs::path(d) / kRunDirLockFile));
  CHECK_FALSE(fs::exists(fs::path(d) / "checkpoints"));
  // Now an unused directory of trainrun's (with a user's file: foreign without --new).
  CHECK(inspect_run_dir(d).kind == RunDirKind::foreign);
  fs::remove(fs::path(d) / "notes.txt");
  CHECK(inspect_run_dir(d).kind == RunDirKind::unused);
  CHECK(claim_run_dir(d, RunDirUse::start, false).held());
}

TEST_CASE("run_dir_of_checkpoint: only a checkpoints/ folder of trainrun's own directory") {
  TempDir dir;
  Experiment e;
  e.run_dir = dir / "run";
  const std::string inside = save_checkpoint(e, 4);
  CHECK(run_dir_of_checkpoint(inside) == fs::absolute(e.run_dir).lexically_normal().string());
  fs::create_directories(dir / "loose");
  fs::copy_file(inside, dir.path / "loose" / "step-0000004.h5");
  CHECK_FALSE(run_dir_of_checkpoint(dir.path / "loose" / "step-0000004.h5"));
  // A checkpoints/ folder among a user's own files is not a run directory either.
  e.run_dir = dir / "project";
  const std::string theirs = save_checkpoint(e, 4);
  touch(dir.path / "project" / "paper.tex");
  CHECK_FALSE(run_dir_of_checkpoint(theirs));
}

TEST_CASE("resolve_run: a checkpoint from outside a run directory starts a new one") {
  TempDir dir;
  RunRequest r;
  r.config = write_config(dir, dir / "run");
  const Experiment original = resolve_run(r).exp;
  const std::string inside = save_checkpoint(original, 4);
  fs::create_directories(dir / "elsewhere");
  const fs::path outside = dir.path / "elsewhere" / "ckpt.h5";
  fs::copy_file(inside, outside);

  RunRequest resume;
  resume.resume = outside.string();
  ResolvedRun got = resolve_run(resume);
  CHECK(got.use == RunDirUse::start);
  CHECK(got.resume_file == outside.string());
  CHECK(got.resume_step == 4);
  CHECK(got.exp.run_dir == fs::path(dir / "run").lexically_normal().string() + "-from-step-4");
  REQUIRE(got.notes.size() == 1);
  CHECK(got.notes[0].find("outside a run directory") != std::string::npos);
  CHECK(got.notes[0].find(got.exp.run_dir) != std::string::npos);
  resume.run_dir = dir / "mine";
  got = resolve_run(resume);
  CHECK(got.use == RunDirUse::start);
  CHECK(got.exp.run_dir == dir / "mine");

  // A relative path works; inside its run directory it continues that run.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path);
  RunRequest relative;
  relative.resume = "run/checkpoints/step-0000004.h5";
  got = resolve_run(relative);
  fs::current_path(cwd);
  CHECK(got.use == RunDirUse::resume);
  CHECK(fs::equivalent(got.exp.run_dir, dir / "run"));
  fs::current_path(dir / "elsewhere");
  relative.resume = "ckpt.h5";
  ResolvedRun loose;
  CHECK_NOTHROW(loose = resolve_run(relative));
  fs::current_path(cwd);
  CHECK(loose.use == RunDirUse::start);
  CHECK(loose.exp.run_dir.find("-from-step-4") != std::string::npos);
}

TEST_CASE("resolve_run: a CONFIG given with --resume must describe the resumed run") {
  TempDir dir;
  RunRequest r;
  r.config = write_config(dir, dir / "run");
  save_checkpoint(resolve_run(r).exp, 4);
  RunRequest resume;
  resume.config = r.config;
  resume.resume = "";
  ResolvedRun same = resolve_run(resume);
  CHECK(same.resume_file == checkpoint_path(dir / "run", 4));
  CHECK(same.notes.empty());
  // A key a resume may change is taken from CONFIG, and said.
  resume.sets = {"train.steps=30"};
  ResolvedRun more = resolve_run(resume);
  CHECK(more.exp.train.steps == 30);
  resume.sets.clear();
  std::ofstream(dir / "other.yaml") << "name: resume-test\nrun_dir: " << (dir / "run")
                                    << "\ntrain:\n  steps: 25\ndata:\n  synthetic: markov\n";
  resume.config = dir / "other.yaml";
  more = resolve_run(resume);
  CHECK(more.exp.train.steps == 25);
  REQUIRE(more.notes.size() == 1);
  CHECK(more.notes[0].find("train.steps=25") != std::string::npos);
  // Any other difference: refused, naming the key.
  std::ofstream(dir / "other.yaml", std::ios::trunc)
      << "name: resume-test\nrun_dir: " << (dir / "run")
      << "\nmodel:\n  d_model: 32\ntrain:\n  steps: 10\ndata:\n  synthetic: markov\n";
  CHECK_THROWS_WITH_AS(resolve_run(resume), doctest::Contains("model.d_model"), ConfigError);
}

TEST_CASE("checkpoints: trainrun removes only files it can tell are its own") {
  TempDir dir;
  const fs::path ck = dir.path / "checkpoints";
  touch(ck / "step-0000001.h5", "a user's file, not HDF5");  // older than everything saved
  touch(ck / "step-1.h5", "not a name trainrun writes");
  touch(ck / "notes.tmp-1", "mine");
  // A checkpoint write's temporary whose writer is dead is trainrun's, and goes.
  const pid_t dead = fork();
  if (dead == 0) std::_Exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path stale = ck / fmt::format("step-0000002.h5.tmp-{}", dead);
  touch(stale, "half a checkpoint");
  {
    Checkpointer writer(dir.str(), 1, false);
    for (int64_t step : {3, 4}) {
      CheckpointData d;
      d.state.step = step;
      d.state.config_yaml = "name: x\n";
      d.params.push_back({"w", {2, 3}, 0});
      d.weights.assign(6, 0.5f);
      d.adam_m.assign(6, 0.0f);
      d.adam_v.assign(6, 0.0f);
      writer.save(std::move(d));
    }
  }
  CHECK(list_checkpoints(dir.str()) ==
        std::vector<std::string>{checkpoint_path(dir.str(), 4), checkpoint_path(dir.str(), 1)});
  CHECK(latest_good_checkpoint(dir.str(), nullptr) == checkpoint_path(dir.str(), 4));
  CHECK(fs::exists(ck / "step-0000001.h5"));  // damaged or not, it is not trainrun's
  CHECK(fs::exists(ck / "step-1.h5"));
  CHECK(fs::exists(ck / "notes.tmp-1"));
  CHECK_FALSE(fs::exists(stale));
  CHECK_FALSE(fs::exists(checkpoint_path(dir.str(), 3)));  // pruned: keep_last 1
}

// --- Exit codes and stop signals
// ------------------------------------------------------------------

TEST_CASE("job_code: the man page's table, 128+N, and 6 for everything else") {
  for (int code : std::vector<int>{kExitOk, kExitFailure, kExitUsage, kExitData, kExitCheckpoint,
                                   kExitDevice, kExitLaunch, kExitGaveUp, kExitHang, kExitRunDir,
                                   kExitResumeMe, kExitInterrupted, 128 + SIGKILL, 128 + SIGSEGV})
    CHECK(job_code(code) == code);
  for (int code : {9, 42, 205, 213, 255}) CHECK(job_code(code) == kExitLaunch);
  // Open MPI's own failure is a launch failure, not "a rank exited with code 255".
  const JobOutcome o = judge_job(255, {}, MpirunFailure{});
  CHECK(o.code == kExitLaunch);
  CHECK_FALSE(restartable(kExitRunDir));
  CHECK(exit_code_meaning(kExitRunDir) == "run directory unusable");
}

TEST_CASE("relayed_signal: stops reach ranks as what mpirun forwards unchanged") {
  for (int sig : {SIGTERM, SIGHUP, SIGUSR1}) CHECK(relayed_signal(sig, 1, SIGTERM) == SIGUSR1);
  CHECK(relayed_signal(SIGINT, 1, SIGTERM) == SIGUSR2);
  CHECK(relayed_signal(SIGINT, 2, SIGTERM) == SIGUSR2);  // ranks stop at once
  CHECK(relayed_signal(SIGINT, 3, SIGTERM) == SIGTERM);  // mpirun kills them
  CHECK(relayed_signal(SIGUSR2, 3, SIGKILL) == SIGKILL);
}

TEST_CASE("StopRelay: remembers the first stop, nests, and restores the handlers") {
  const int status = in_child([] {
    struct sigaction before {};
    sigaction(SIGTERM, nullptr, &before);
    {
      StopRelay outer;
      {
        StopRelay inner;
        if (StopRelay::requested() != 0) std::_Exit(1);
        raise(SIGTERM);
        raise(SIGINT);
        if (StopRelay::requested() != SIGTERM || StopRelay::stop_code() != kExitResumeMe)
          std::_Exit(2);
      }
      if (StopRelay::requested() != SIGTERM) std::_Exit(3);  // the inner one left it in place
      if (!StopRelay::sleep_unless_stopped(10)) std::_Exit(4);
    }
    struct sigaction after {};
    sigaction(SIGTERM, nullptr, &after);
    if (after.sa_handler != before.sa_handler) std::_Exit(5);
    StopRelay again;
    raise(SIGUSR2);
    std::_Exit(StopRelay::stop_code() == kExitInterrupted ? 0 : 6);
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("printable: control characters from configs never reach the terminal raw") {
  CHECK(printable("plain text\n\tand more") == "plain text\n\tand more");
  CHECK(printable("a\x1b[31mred\r") == "a\\x1b[31mred\\x0d");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("csi \xc2\x9b and \xc3\xa9") == "csi \\u009b and \xc3\xa9");  // UTF-8 kept
}

TEST_CASE("run_launch: a supervised single rank's failure is rank 0's, on this host") {
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", "kill -9 $$"};
  plan.single_rank = true;
  MpirunFailure f;
  CHECK(run_launch(plan, &f) == 128 + SIGKILL);
  CHECK(f.rank == 0);
  CHECK(f.host == host());
  CHECK(f.text == "rank 0 on " + host() + " killed by signal 9 (Killed)");
  plan.argv = {"/bin/sh", "-c", "exit 3"};
  CHECK(run_launch(plan, &f) == 3);
  CHECK(f.text == "rank 0 on " + host() + " exited with code 3");
}

TEST_CASE("run_launch: mpirun's own failure is not called a rank's exit") {
  LaunchPlan plan;  // stands in for an mpirun that lost a host: it exits 255 and names nobody
  plan.argv = {"/bin/sh", "-c",
               "echo 'ORTE has lost communication with a remote daemon' >&2; "
               "exit 255"};
  MpirunFailure f;
  CHECK(run_launch(plan, &f) == 255);
  CHECK(f.rank == -1);
  CHECK(f.text.find("mpirun exited with code 255 without naming a rank") != std::string::npos);
  const JobOutcome o = judge_job(255, {}, f);
  CHECK(o.code == kExitLaunch);
  CHECK(o.cause == f.text);
}

TEST_CASE("run_launch: a failed job that will not tear down is killed after teardown_timeout") {
  // Stands in for an mpirun waiting on a daemon whose host went silent: it ignores SIGTERM
  // and never ends by itself. A rank has already recorded its failure.
  TempDir dir;
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"};
  plan.run_dir = dir.str();
  plan.teardown_timeout = 1;
  SUBCASE("a failure record starts the clock; the job is killed, its code is SIGKILL's") {
    FailureRecord r = record(1, kExitHang, 1712345678.0, "watchdog");
    r.host = "node2";
    REQUIRE(write_failure_record(dir.str(), r));
    MpirunFailure f;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(run_launch(plan, &f) == 128 + SIGKILL);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(took >= 1.0);  // not before the deadline
    CHECK(took < 30.0);  // and not never (1 s + a scan a second + polling)
    // The records, not the kill, still decide the job's verdict.
    const JobOutcome o = judge_job(128 + SIGKILL, read_failure_records(dir.str()), f);
    CHECK(o.code == kExitHang);
    CHECK(o.rank == 1);
  }
  SUBCASE("a stop is no failure: ranks writing their stop checkpoint are left alone") {
    FailureRecord r = record(0, kExitResumeMe, 1712345678.0, "stopped");
    REQUIRE(write_failure_record(dir.str(), r));
    plan.argv = {"/bin/sh", "-c", "trap '' TERM; sleep 3; exit 75"};
    MpirunFailure f;
    CHECK(run_launch(plan, &f) == kExitResumeMe);
  }
  SUBCASE("without a record the job runs as long as it likes") {
    plan.argv = {"/bin/sh", "-c", "sleep 3; exit 0"};
    MpirunFailure f;
    CHECK(run_launch(plan, &f) == 0);
  }
}

namespace {

// Gone: no such process, or a zombie (its parent, perhaps init, has yet to reap it).
bool process_gone(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

pid_t read_pid(const std::string& path) {
  for (int i = 0; i < 500; ++i) {  // up to 5 s for the stand-in to write it
    std::ifstream f(path);
    long pid = 0;
    if (f >> pid && pid > 0) return static_cast<pid_t>(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// A stand-in for an mpirun blocked before it starts any rank (hwloc waiting for an X server):
// deaf to the signals the relay sends, it never ends by itself. It has started one process in
// a session of its own, as mpirun starts each rank in a process group of its own.
LaunchPlan blocked_mpirun(const TempDir& dir) {
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c",
               "trap '' TERM INT USR1 USR2 HUP; setsid sleep 1000 & echo $! > " + dir / "child" +
                   "; while :; do sleep 1; done"};
  plan.run_dir = dir.str();
  return plan;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("kill_process_tree ends a process and what it started, in other sessions too") {
  TempDir dir;
  const pid_t root = fork();
  if (root == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c",
          ("setsid sh -c 'sleep 1000 & echo $! > " + dir / "grandchild" + "; wait' & echo $! > " +
           dir / "child" + "; wait")
              .c_str(),
          static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  const pid_t child = read_pid(dir / "child"), grandchild = read_pid(dir / "grandchild");
  REQUIRE(child > 0);
  REQUIRE(grandchild > 0);
  const std::vector<pid_t> below = descendants(root);
  CHECK(std::find(below.begin(), below.end(), child) != below.end());
  CHECK(std::find(below.begin(), below.end(), grandchild) != below.end());
  CHECK(kill_process_tree(root, 5).empty());
  int status = 0;
  CHECK(waitpid(root, &status, 0) == root);  // left for its parent to reap
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  CHECK(process_gone(child));
  CHECK(process_gone(grandchild));
}

TEST_CASE("run_launch: an mpirun that starts no rank is ended after launch_timeout (exit 6)") {
  TempDir dir;
  LaunchPlan plan = blocked_mpirun(dir);
  plan.launch_timeout = 1;
  MpirunFailure f;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_launch(plan, &f) == kExitLaunch);
  const double took = seconds_since(t0);
  CHECK(took >= 1.0);                           // not before the bound
  CHECK(took < 1.0 + StartBound::kGrace + 10);  // nor much after (SIGTERM ignored: killed)
  CHECK(f.not_launched);
  CHECK(f.text.find("mpirun started no rank within 1 s (fault_tolerance.launch_timeout)") !=
        std::string::npos);
  CHECK(f.text.find("HWLOC_COMPONENTS=-gl") != std::string::npos);
  const pid_t child = read_pid(dir / "child");
  REQUIRE(child > 0);
  CHECK(process_gone(child));  // the "rank" in its own session went too
  // A rank caught starting may have recorded a stop: still a launch failure, restartable.
  const JobOutcome o = judge_job(kExitLaunch, {record(0, kExitResumeMe, 1.0, "stopped")}, f);
  CHECK(o.code == kExitLaunch);
  CHECK(o.not_launched);
  CHECK(o.cause == f.text);
}

TEST_CASE("run_launch: once a rank's heartbeat is there, the launch bound stands aside") {
  TempDir dir;
  LaunchPlan plan;
  plan.run_dir = dir.str();
  plan.launch_timeout = 1;
  fs::create_directories(dir / "logs");
  // The job's ranks beat at once, then the job runs past the bound and finishes.
  plan.argv = {"/bin/sh", "-c", "echo beat > " + heartbeat_path(dir.str(), 0) + "; sleep 3"};
  MpirunFailure f;
  CHECK(run_launch(plan, &f) == 0);
  // A heartbeat from an earlier attempt is cleared before a relaunch; without it the bound
  // applies again.
  clear_heartbeats(dir.str());
  CHECK_FALSE(any_heartbeat(dir.str()));
  plan.argv = {"/bin/sh", "-c", "sleep 3"};
  CHECK(run_launch(plan, &f) == kExitLaunch);
}

TEST_CASE("run_launch: a stop before any rank started ends mpirun and what it started") {
  // In a child process: the relay's handlers are process-wide.
  TempDir dir;
  struct Case {
    std::vector<int> signals;
    int code;
    double within;
  };
  for (const Case& c : {Case{{SIGTERM}, kExitResumeMe, StartBound::kGrace + 5},
                        Case{{SIGINT}, kExitInterrupted, StartBound::kGrace + 5},
                        // A second SIGINT does not wait for mpirun's grace.
                        Case{{SIGINT, SIGINT}, kExitInterrupted, StartBound::kGrace - 1}}) {
    CAPTURE(c.signals.size());
    CAPTURE(c.signals.front());
    fs::remove(dir / "child");
    const auto t0 = std::chrono::steady_clock::now();
    const int status = in_child([&] {
      LaunchPlan plan = blocked_mpirun(dir);
      plan.launch_timeout = 600;
      std::thread([&] {
        read_pid(dir / "child");  // the "rank" exists
        for (int sig : c.signals) {
          kill(getpid(), sig);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }).detach();
      MpirunFailure f;
      const int code = run_launch(plan, &f);
      std::_Exit(code == c.code && !f.not_launched ? 0 : 100 + code % 100);
    });
    CHECK(seconds_since(t0) < c.within + 1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    const pid_t child = read_pid(dir / "child");
    REQUIRE(child > 0);
    CHECK(process_gone(child));
  }
}

TEST_CASE("unreachable_hosts asks every host at once and names the ones that do not answer") {
  trainrun::testing::TempDir tmp;
  // A stand-in for ssh: "up" answers, "down" refuses, "cut" never answers (a lost link).
  const std::string agent = tmp / "fake-ssh";
  {
    std::ofstream f(agent);
    f << "#!/bin/sh\ncase \"$1\" in up) exit 0 ;; cut) exec sleep 60 ;; *) exit 255 ;; esac\n";
  }
  chmod(agent.c_str(), 0755);
  const char* old = std::getenv("OMPI_MCA_plm_rsh_agent");
  const std::string saved = old ? old : "";
  setenv("OMPI_MCA_plm_rsh_agent", agent.c_str(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> silent =
      unreachable_hosts({"up", "down", trainrun::host_name(), "cut", "up2"}, 1.0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (old)
    setenv("OMPI_MCA_plm_rsh_agent", saved.c_str(), 1);
  else
    unsetenv("OMPI_MCA_plm_rsh_agent");
  // This host is not asked; "up2" is refused like "down" (the stand-in knows only "up").
  CHECK(silent == std::vector<std::string>{"down", "cut", "up2"});
  // "cut" was killed at the deadline: nobody waits for sleep 60 (a generous bound: CI is noisy).
  CHECK(took < 20);
}
