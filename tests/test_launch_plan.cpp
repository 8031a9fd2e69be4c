// The mpirun command trainrun builds (hosts, keepalive, the shell line people copy) and the
// hosts it checks before it starts.

#include "launch_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::launch_test;

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

TEST_CASE("printable: control characters from configs never reach the terminal raw") {
  CHECK(printable("plain text\n\tand more") == "plain text\n\tand more");
  CHECK(printable("a\x1b[31mred\r") == "a\\x1b[31mred\\x0d");
  CHECK(printable(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(printable("\x7f") == "\\x7f");
  CHECK(printable("csi \xc2\x9b and \xc3\xa9") == "csi \\u009b and \xc3\xa9");  // UTF-8 kept
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
