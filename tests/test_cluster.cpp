// Slurm scripts and Kubernetes manifests: the exact directives, the shell words the job runs
// (evaluated by a real bash), option checks, sbatch submission through a stand-in sbatch, and
// the manifest parsed back.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "trainrun/cluster/cluster.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"

using namespace trainrun;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(name: tiny
model: {type: gpt, vocab_size: 64, seq_len: 16, n_layer: 1, n_head: 2, d_model: 16}
data: {synthetic: markov}
train: {steps: 20, batch_size: 8}
distributed: {nproc: 2}
)";

Experiment tiny(const std::vector<std::string>& sets = {}) {
  return parse_experiment(kConfig, "tiny.yaml", sets);
}

SlurmOptions base_opts() {
  SlurmOptions o;
  o.trainrun_bin = "/opt/trainrun/bin/trainrun";
  o.config_path = "/home/me/tiny.yaml";
  return o;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> sbatch_lines(const std::string& script) {
  std::vector<std::string> out;
  for (const auto& l : lines_of(script))
    if (l.rfind("#SBATCH ", 0) == 0) out.push_back(l.substr(8));
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text))
    if (l == line) return true;
  return false;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command and returns its stdout.
std::string run_sh(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(p);
  std::string out;
  std::array<char, 4096> buf{};
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p.get())) > 0;) out.append(buf.data(), n);
  return out;
}

// The words of the script's `step=(...)` array, as bash itself expands them.
std::vector<std::string> step_words(const std::string& script) {
  std::string step;
  for (const auto& l : lines_of(script))
    if (l.rfind("step=(", 0) == 0) step = l;
  REQUIRE(!step.empty());
  const fs::path f = fs::temp_directory_path() / ("trainrun-step-" + std::to_string(getpid()));
  std::ofstream(f) << step << "\nprintf '%s\\n' \"${step[@]}\"\n";
  auto words = lines_of(run_sh("bash " + f.string()));
  fs::remove(f);
  return words;
}

using trainrun::testing::TempDir;

// Puts `dir` first on PATH for one test.
class PathGuard {
 public:
  explicit PathGuard(const std::string& path) {
    if (const char* p = std::getenv("PATH")) old_ = p;
    setenv("PATH", path.c_str(), 1);
  }
  ~PathGuard() {
    if (old_)
      setenv("PATH", old_->c_str(), 1);
    else
      unsetenv("PATH");
  }

 private:
  std::optional<std::string> old_;
};

void write_exe(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
  chmod(p.c_str(), 0755);
}

}  // namespace

TEST_CASE("slurm script: directives from the config's defaults") {
  Experiment exp = tiny();
  exp.run_dir = "/scratch/runs/tiny";
  const std::string s = slurm_script(exp, base_opts());
  CHECK(s.rfind("#!/bin/bash\n", 0) == 0);
  const std::vector<std::string> expected = {
      "--job-name=tiny",     "--nodes=1",
      "--ntasks-per-node=2", "--requeue",
      "--signal=B:USR1@300", "--output=/scratch/runs/tiny/slurm-%j.out",
      "--open-mode=append",  "--chdir=" + fs::current_path().string(),
  };
  CHECK(sbatch_lines(s) == expected);
  // Every directive precedes the first command, or sbatch ignores it.
  bool seen_command = false;
  for (const auto& l : lines_of(s)) {
    if (l.rfind("#SBATCH", 0) == 0) CHECK_FALSE(seen_command);
    if (!l.empty() && l[0] != '#') seen_command = true;
  }
  const std::vector<std::string> words = {"srun",
                                          "--mpi=pmix",
                                          "--kill-on-bad-exit=1",
                                          "/opt/trainrun/bin/trainrun",
                                          "run",
                                          "/home/me/tiny.yaml",
                                          "--resume",
                                          "--run-dir",
                                          "/scratch/runs/tiny"};
  CHECK(step_words(s) == words);
  CHECK(has_line(s, "trap 'forward USR1' USR1"));
  CHECK(has_line(s, "trap 'forward TERM' TERM"));
  CHECK(has_line(s, "    if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi"));
  CHECK(s.find("SLURM_RESTART_COUNT") != std::string::npos);
}

TEST_CASE("slurm script: every option, extra lines, overrides and mpirun") {
  Experiment exp = tiny(
      {"train.batch_size=64", "slurm.extra=[\"--constraint=a100\", \"#SBATCH --mail-type=END\"]"});
  exp.run_dir = "/scratch/my runs/tiny";
  SlurmOptions o = base_opts();
  o.nodes = 4;
  o.ntasks_per_node = 8;
  o.gpus_per_node = 8;
  o.cpus_per_task = 12;
  o.time = "1-00:00:00";
  o.partition = "gpu";
  o.account = "proj42";
  o.signal_seconds = 600;
  o.launcher = "mpirun";
  o.config_path = "/home/me/it's here.yaml";
  o.sets = {"optimizer.lr=3e-4", "name=a b"};
  const std::string s = slurm_script(exp, o);
  const std::vector<std::string> expected = {
      "--job-name=tiny",
      "--nodes=4",
      "--ntasks-per-node=8",
      "--gpus-per-node=8",
      "--cpus-per-task=12",
      "--time=1-00:00:00",
      "--partition=gpu",
      "--account=proj42",
      "--requeue",
      "--signal=B:USR1@600",
      "--output=\"/scratch/my runs/tiny/slurm-%j.out\"",
      "--open-mode=append",
      "--chdir=" + fs::current_path().string(),
      "--constraint=a100",
      "--mail-type=END",
  };
  CHECK(sbatch_lines(s) == expected);
  // The job is 4x8 while the config says 1x2: the ranks are told the job's shape.
  const std::vector<std::string> words = {"mpirun",
                                          "-np",
                                          "32",
                                          "--bind-to",
                                          "none",
                                          "/opt/trainrun/bin/trainrun",
                                          "run",
                                          "/home/me/it's here.yaml",
                                          "--resume",
                                          "--run-dir",
                                          "/scratch/my runs/tiny",
                                          "--set",
                                          "optimizer.lr=3e-4",
                                          "--set",
                                          "name=a b",
                                          "--set",
                                          "distributed.nodes=4",
                                          "--set",
                                          "distributed.nproc=8"};
  CHECK(step_words(s) == words);
  CHECK(has_line(s, "  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"));
}

TEST_CASE("slurm script: bash accepts it") {
  SlurmOptions o = base_opts();
  for (const char* launcher : {"srun", "mpirun"}) {
    o.launcher = launcher;
    TempDir d;
    std::ofstream(d.path / "job.sbatch") << slurm_script(tiny(), o);
    CHECK(std::system(("bash -n " + (d.path / "job.sbatch").string()).c_str()) == 0);
  }
}

TEST_CASE("slurm script: impossible options are refused with the fix") {
  const Experiment exp = tiny();
  auto refuses = [&](SlurmOptions o, const std::string& needle) {
    try {
      slurm_script(exp, o);
      FAIL("accepted: " << needle);
    } catch (const ConfigError& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  SlurmOptions o = base_opts();
  o.nodes = -1;
  refuses(o, "--nodes -1");
  o = base_opts();
  o.ntasks_per_node = -2;
  refuses(o, "--ntasks-per-node -2");
  o = base_opts();
  o.gpus_per_node = 1;
  refuses(o, "set --ntasks-per-node 1 or --gpus-per-node 2");
  o = base_opts();
  o.signal_seconds = 0;
  refuses(o, "--signal-seconds 0");
  o = base_opts();
  o.time = "10";  // 10 minutes, not longer than the 300 s warning... it is: 600 > 300
  CHECK_NOTHROW(slurm_script(exp, o));
  o.time = "4:00";  // 4 min 0 s = 240 s <= 300 s
  refuses(o, "lengthen --time");
  o.time = "a day";
  refuses(o, "not a Slurm time limit");
  o = base_opts();
  o.launcher = "ssh";
  refuses(o, "use srun or mpirun");
  o = base_opts();
  o.partition = "gpu\"x";
  refuses(o, "--partition");
  o = base_opts();
  o.ntasks_per_node = 3;  // batch 8 over 3 ranks
  CHECK_THROWS_AS(slurm_script(exp, o), ConfigError);

  const Experiment bad_extra = tiny({"slurm.extra=[\"constraint=a100\"]"});
  CHECK_THROWS_WITH_AS(slurm_script(bad_extra, base_opts()), doctest::Contains("slurm.extra[0]"),
                       ConfigError);
}

TEST_CASE("slurm submit: writes the config and script, runs sbatch, returns the job id") {
  TempDir d;
  const fs::path bin = d.path / "bin";
  fs::create_directories(bin);
  // A stand-in sbatch that records its arguments and answers like `sbatch --parsable`.
  write_exe(bin / "sbatch",
            "#!/bin/sh\necho \"$@\" > " + (d.path / "args").string() + "\necho '4242;cluster'\n");
  Experiment exp = tiny({"optimizer.lr=0.005"});
  exp.run_dir = (d.path / "runs" / "tiny").string();
  SlurmOptions o = base_opts();
  o.ntasks_per_node = 4;
  o.sets = {"optimizer.lr=1"};  // already applied to exp: must not reach the job
  std::string id;
  {
    PathGuard path(bin.string() + ":/usr/bin:/bin");
    id = slurm_submit(exp, o);
  }
  CHECK(id == "4242");
  const fs::path script = fs::path(exp.run_dir) / "job.sbatch";
  const fs::path config = fs::path(exp.run_dir) / "config.submitted.yaml";
  CHECK(read_file(d.path / "args") == "--parsable " + script.string() + "\n");
  const Experiment sub = parse_experiment(read_file(config), config.string(), {});
  CHECK(sub.optimizer.lr == doctest::Approx(0.005));
  CHECK(sub.distributed.nproc == 4);
  CHECK(sub.run_dir == exp.run_dir);
  const std::vector<std::string> words = {"srun",
                                          "--mpi=pmix",
                                          "--kill-on-bad-exit=1",
                                          "/opt/trainrun/bin/trainrun",
                                          "run",
                                          config.string(),
                                          "--resume",
                                          "--run-dir",
                                          exp.run_dir};
  CHECK(step_words(read_file(script)) == words);
}

TEST_CASE("slurm submit: sbatch refusing or missing is a LaunchError saying why") {
  TempDir d;
  Experiment exp = tiny();
  exp.run_dir = (d.path / "run").string();
  write_exe(d.path / "sbatch",
            "#!/bin/sh\necho 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n");
  {
    PathGuard path(d.path.string());
    CHECK_THROWS_WITH_AS(slurm_submit(exp, base_opts()),
                         doctest::Contains("invalid partition specified: nope"), LaunchError);
  }
  {
    PathGuard path((d.path / "empty").string());
    CHECK_THROWS_WITH_AS(slurm_submit(exp, base_opts()), doctest::Contains("slurm-client"),
                         LaunchError);
  }
}

TEST_CASE("k8s manifest: ConfigMap, claim and MPIJob") {
  K8sOptions o;
  o.nodes = 2;
  o.gpus_per_node = 4;
  o.ranks_per_node = 4;
  o.image = "registry.example/trainrun:1.0";
  o.namespace_ = "ml";
  o.cpu = "16";
  o.memory = "128Gi";
  Experiment exp = tiny({"name=Tiny_GPT", "train.batch_size=16"});
  const auto docs = YAML::LoadAll(k8s_manifest(exp, o));
  REQUIRE(docs.size() == 3);
  CHECK(docs[0]["kind"].as<std::string>() == "ConfigMap");
  CHECK(docs[0]["metadata"]["name"].as<std::string>() == "tiny-gpt-config");
  CHECK(docs[0]["metadata"]["namespace"].as<std::string>() == "ml");
  const Experiment in_pod =
      parse_experiment(docs[0]["data"]["config.yaml"].as<std::string>(), "configmap", {});
  CHECK(in_pod.run_dir == "/runs/Tiny_GPT");
  CHECK(in_pod.distributed.nodes == 2);
  CHECK(in_pod.distributed.nproc == 4);
  CHECK(in_pod.train.batch_size == 16);

  CHECK(docs[1]["kind"].as<std::string>() == "PersistentVolumeClaim");
  CHECK(docs[1]["metadata"]["name"].as<std::string>() == "tiny-gpt-runs");
  CHECK(docs[1]["spec"]["accessModes"][0].as<std::string>() == "ReadWriteMany");

  const YAML::Node job = docs[2];
  CHECK(job["apiVersion"].as<std::string>() == "kubeflow.org/v2beta1");
  CHECK(job["kind"].as<std::string>() == "MPIJob");
  CHECK(job["spec"]["slotsPerWorker"].as<int>() == 4);
  CHECK(job["spec"]["runPolicy"]["cleanPodPolicy"].as<std::string>() == "Running");
  const YAML::Node launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"];
  CHECK(launcher["replicas"].as<int>() == 1);
  CHECK(launcher["restartPolicy"].as<std::string>() == "OnFailure");
  const auto cmd =
      launcher["template"]["spec"]["containers"][0]["command"].as<std::vector<std::string>>();
  const std::vector<std::string> expected_cmd = {
      "mpirun",  "-np", "8", "--bind-to", "none", "trainrun", "run", "/config/config.yaml",
      "--resume"};
  CHECK(cmd == expected_cmd);
  // Kubernetes wants strings: `8` must be quoted, or it reads as a number.
  CHECK(launcher["template"]["spec"]["containers"][0]["command"][2].Tag() == "!");
  const YAML::Node worker = job["spec"]["mpiReplicaSpecs"]["Worker"];
  CHECK(worker["replicas"].as<int>() == 2);
  CHECK(worker["restartPolicy"].as<std::string>() == "OnFailure");
  const YAML::Node c = worker["template"]["spec"]["containers"][0];
  CHECK(c["image"].as<std::string>() == "registry.example/trainrun:1.0");
  CHECK(c["resources"]["limits"]["nvidia.com/gpu"].as<int>() == 4);
  CHECK(c["resources"]["limits"]["cpu"].as<std::string>() == "16");
  CHECK(c["resources"]["limits"]["memory"].as<std::string>() == "128Gi");
  CHECK(c["volumeMounts"][0]["mountPath"].as<std::string>() == "/config");
  CHECK(c["volumeMounts"][1]["mountPath"].as<std::string>() == "/runs");
  const YAML::Node vols = worker["template"]["spec"]["volumes"];
  CHECK(vols[0]["configMap"]["name"].as<std::string>() == "tiny-gpt-config");
  CHECK(vols[1]["persistentVolumeClaim"]["claimName"].as<std::string>() == "tiny-gpt-runs");
}

TEST_CASE("k8s manifest: an existing claim, no GPUs, bad options") {
  K8sOptions o;
  o.pvc = "shared-runs";
  const auto docs = YAML::LoadAll(k8s_manifest(tiny(), o));
  REQUIRE(docs.size() == 2);
  CHECK(docs[1]["kind"].as<std::string>() == "MPIJob");
  const YAML::Node worker = docs[1]["spec"]["mpiReplicaSpecs"]["Worker"];
  CHECK(worker["replicas"].as<int>() == 1);
  CHECK(docs[1]["spec"]["slotsPerWorker"].as<int>() == 2);
  CHECK_FALSE(worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]);
  CHECK(worker["template"]["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"]
            .as<std::string>() == "shared-runs");

  K8sOptions bad;
  bad.gpus_per_node = 1;  // 2 ranks per pod
  CHECK_THROWS_WITH_AS(k8s_manifest(tiny(), bad), doctest::Contains("--gpus-per-node 2"),
                       ConfigError);
  bad = K8sOptions{};
  bad.namespace_ = "My_NS";
  CHECK_THROWS_WITH_AS(k8s_manifest(tiny(), bad), doctest::Contains("--namespace"), ConfigError);
  const auto numeric = YAML::LoadAll(k8s_manifest(tiny({"name=2024"}), K8sOptions{}));
  CHECK(numeric[2]["metadata"]["name"].Tag() == "!");
  CHECK(numeric[2]["metadata"]["name"].as<std::string>() == "2024");
  CHECK_THROWS_WITH_AS(k8s_manifest(tiny({"name=___"}), K8sOptions{}),
                       doctest::Contains("no letter or digit"), ConfigError);
}

TEST_CASE("k8s manifest: the metrics endpoint is annotated for Prometheus on the workers") {
  const auto off = YAML::LoadAll(k8s_manifest(tiny(), K8sOptions{}));
  const YAML::Node plain = off[2]["spec"]["mpiReplicaSpecs"]["Worker"]["template"];
  CHECK_FALSE(plain["metadata"]);
  CHECK_FALSE(plain["spec"]["containers"][0]["ports"]);

  const auto docs = YAML::LoadAll(k8s_manifest(tiny({"logging.prometheus_port=9500"}), {}));
  const YAML::Node worker = docs[2]["spec"]["mpiReplicaSpecs"]["Worker"]["template"];
  const YAML::Node a = worker["metadata"]["annotations"];
  CHECK(a["prometheus.io/scrape"].as<std::string>() == "true");
  CHECK(a["prometheus.io/port"].as<std::string>() == "9500");
  CHECK(a["prometheus.io/path"].as<std::string>() == "/metrics");
  CHECK(a["prometheus.io/port"].Tag() == "!");  // annotation values must be strings
  const YAML::Node port = worker["spec"]["containers"][0]["ports"][0];
  CHECK(port["name"].as<std::string>() == "metrics");
  CHECK(port["containerPort"].as<int>() == 9500);
  CHECK(port["protocol"].as<std::string>() == "TCP");
  // The launcher only runs mpirun: no endpoint there.
  CHECK_FALSE(docs[2]["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"]);
  const Experiment in_pod =
      parse_experiment(docs[0]["data"]["config.yaml"].as<std::string>(), "configmap", {});
  CHECK(in_pod.logging.prometheus_port == 9500);
}

TEST_CASE("slurm script: says where the metrics endpoint is") {
  const std::string off = slurm_script(tiny(), base_opts());
  CHECK(off.find("/metrics") == std::string::npos);
  const std::string s = slurm_script(tiny({"logging.prometheus_port=9500"}), base_opts());
  CHECK(has_line(s,
                 "echo \"trainrun: metrics for Prometheus at http://$(hostname):9500/metrics (rank "
                 "0 runs on this node, the allocation's first)\""));
}
