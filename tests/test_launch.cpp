#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"
#include "trainrun/comm.h"
#include "trainrun/errors.h"
#include "trainrun/launch.h"
#include "trainrun/mpirun_failure.h"

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
    } else {
      CHECK(p.env.empty());
    }
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
  // The first report wins: later ones are usually consequences of it.
  CHECK(describe_mpirun_failure("mpirun noticed that process rank 3 with PID 0 on node a exited "
                                "on signal 11 (Segmentation fault).\n  Process name: "
                                "[[1,1],0]\n  Exit code:    1\n") ==
        "rank 3 on a killed by signal 11 (Segmentation fault)");
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
