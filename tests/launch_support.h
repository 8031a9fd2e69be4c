// What the launch concept's unit tests share (test_rank_env, test_launch_plan, test_failures,
// test_run_dir, test_run_launch): environment guards, small experiments, a fork helper, real
// mpirun plans of /bin/sh ranks, and run-directory fixtures.
#pragma once

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
#include "trainrun/launch/launch.h"
#include "trainrun/launch/mpirun_failure.h"
#include "trainrun/launch/run_command.h"
#include "trainrun/launch/supervisor.h"
#include "trainrun/preflight/preflight.h"
#include "trainrun/runtime/failure_record.h"
#include "trainrun/runtime/heartbeats.h"
#include "trainrun/runtime/host.h"
#include "trainrun/runtime/omp_threads.h"
#include "trainrun/runtime/rank_env.h"

namespace trainrun::launch_test {

using namespace trainrun;
namespace fs = std::filesystem;

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

inline void clear_rank_vars(EnvGuard& g) {
  for (const char* v :
       {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID",
        "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID",
        "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "PMI_RANK",
        "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"})
    g.unset(v);
}

using trainrun::testing::TempDir;

inline Experiment experiment(int nproc, int nodes = 1) {
  Experiment e;
  e.distributed.nproc = nproc;
  e.distributed.nodes = nodes;
  return e;
}

inline const std::vector<std::string> kSelf = {"/opt/trainrun/bin/trainrun", "run",
                                               "my config.yaml"};

inline bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
// True when `seq` occurs contiguously in v.
inline bool has_seq(const std::vector<std::string>& v, const std::vector<std::string>& seq) {
  return std::search(v.begin(), v.end(), seq.begin(), seq.end()) != v.end();
}

inline bool mpirun_available() {
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

inline int more_ranks_than_cores() {
  return static_cast<int>(std::thread::hardware_concurrency()) + 1;
}

// Real mpirun runs of /bin/sh ranks.
inline std::string host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}
inline LaunchPlan sh_plan(const std::string& script) {
  return plan_launch(experiment(2), {"/bin/sh", "-c", script});
}

// --- Failure records ---------------------------------------------------------------------------

inline FailureRecord record(int rank, int code, double time, const std::string& cause = "error") {
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
inline int in_child(Body body) {
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

// --- Resume resolution ---------------------------------------------------------------------------

inline std::string write_config(const TempDir& dir, const std::string& run_dir) {
  const std::string path = dir / "exp.yaml";
  std::ofstream(path) << "name: resume-test\nrun_dir: " << run_dir
                      << "\ntrain:\n  steps: 10\ndata:\n  synthetic: markov\n";
  return path;
}

// A single-file checkpoint of `exp` at `step` (the format `export` writes, which resumes too):
// one small tensor, the resolved config inside.
inline std::string save_checkpoint(const Experiment& exp, int64_t step) {
  CheckpointData d;
  d.state.step = step;
  d.state.config_yaml = to_yaml(exp);
  d.params.push_back({"w", {2, 3}, 0});
  d.weights.assign(6, 0.5f);
  d.adam_m.assign(6, 0.0f);
  d.adam_v.assign(6, 0.0f);
  const std::string path = single_file_checkpoint_path(exp.run_dir, step);
  fs::create_directories(fs::path(path).parent_path());
  write_checkpoint(path, d);
  return path;
}

// One rank's snapshot of a tiny model (one tensor "w" [2, 3] of 0.5) at `step`.
inline RankSnapshot tiny_snapshot(int64_t step, const std::string& config_yaml) {
  const std::vector<ParamEntry> params = {{"w", {2, 3}, 0}};
  const std::vector<float> w(6, 0.5f);
  StateDict sd;
  add_flat_state(sd, "model", params, {0, 6}, [&](int64_t at, int64_t n, float* out) {
    std::copy(w.begin() + at, w.begin() + at + n, out);
  });
  TrainState st;
  st.step = step;
  for (NamedValue& v : values_of(st)) sd.put(std::move(v.name), v.value);
  RankSnapshot snap;
  snap.config_yaml = config_yaml;
  take_snapshot(sd, &snap);
  return snap;
}

// The same state as training saves it: the checkpoint folder of one rank.
inline std::string save_checkpoint_folder(const Experiment& exp, int64_t step) {
  RankSnapshot snap = tiny_snapshot(step, to_yaml(exp));
  Checkpointer ck(exp.run_dir, 0, false);
  ck.save(std::move(snap));
  ck.commit(step, 1);
  return checkpoint_path(exp.run_dir, step);
}

// --- The run directory: one run, one process
// ------------------------------------------------------

inline void touch(const fs::path& p, const std::string& text = "x") {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RunDirError& e) {
    return e.what();
  }
  return "";
}

// Gone: no such process, or a zombie (its parent, perhaps init, has yet to reap it).
inline bool process_gone(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

inline pid_t read_pid(const std::string& path) {
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
inline LaunchPlan blocked_mpirun(const TempDir& dir) {
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c",
               "trap '' TERM INT USR1 USR2 HUP; setsid sleep 1000 & echo $! > " + dir / "child" +
                   "; while :; do sleep 1; done"};
  plan.run_dir = dir.str();
  return plan;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace trainrun::launch_test
