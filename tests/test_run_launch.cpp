// run_launch against real mpirun and /bin/sh ranks: supervision, teardown of a job that will
// not end, the launch bound and stops before any rank started.

#include "launch_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::launch_test;

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

TEST_CASE("run_launch: a stop after every rank finished, unseen by the bound, leaves 0") {
  // A short run can start, finish (its ranks remove their heartbeats) and be signalled between
  // two looks of the bound. mpirun then ends by itself with 0 inside its grace: the run is done.
  TempDir dir;
  const int status = in_child([&] {
    LaunchPlan plan;
    plan.run_dir = dir.str();
    plan.launch_timeout = 600;
    fs::create_directories(dir / "logs");
    plan.argv = {
        "/bin/sh", "-c",
        "trap '' TERM INT USR1 USR2 HUP; echo $$ > " + dir / "child" + "; sleep 1; exit 0"};
    std::thread([&] {
      read_pid(dir / "child");
      kill(getpid(), SIGTERM);
    }).detach();
    MpirunFailure f;
    std::_Exit(run_launch(plan, &f));
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
