// How a failed job is judged: Open MPI's reports, the ranks' failure records, the exit codes
// and which of them a restart can help, and how stop signals reach the ranks.

#include "launch_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::launch_test;

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
