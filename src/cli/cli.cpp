// The command line (CLI11). Kept in one file: CLI11 is slow to compile.
// Every subcommand parses its arguments here and calls one function of a library concept.
#include "trainrun/cli.h"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <regex>
#include <set>
#include <thread>

#include "trainrun/checkpoint.h"
#include "trainrun/cluster.h"
#include "trainrun/config.h"
#include "trainrun/data.h"
#include "trainrun/errors.h"
#include "trainrun/experiment.h"
#include "trainrun/launch.h"
#include "trainrun/metrics.h"
#include "trainrun/plan.h"
#include "trainrun/report.h"
#include "trainrun/trace.h"
#include "trainrun/trainer.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

const char* kDescription =
    "trainrun: train GPT and MLP language models from a YAML experiment, on CPU or CUDA,\n"
    "data-parallel over MPI/NCCL, with HDF5 checkpoints and metric logs.\n\n"
    "  trainrun CONFIG.yaml [--set KEY=VALUE]...   train (same as `trainrun run CONFIG`)\n"
    "  trainrun --resume RUN_DIR|CHECKPOINT         continue a run where it stopped\n\n"
    "Exit codes: 0 ok, 1 internal error, 2 bad usage or config, 3 bad data, 4 no usable\n"
    "checkpoint, 5 device unavailable, 6 launch failure, 7 gave up, 75 stopped by\n"
    "SIGTERM/SIGUSR1 after a checkpoint (resume me), 130 interrupted. See man trainrun.";

struct RunArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string run_dir;
  std::optional<std::string> resume;  // present: resume; empty value: from the config's run_dir
  bool dry_run = false;
  std::string profile;
};

void print_warning(const std::string& w) {
  fmt::print(stderr, "warning: {}\n", w);
}

// Resolves what to run: the experiment, and the checkpoint file to resume from ("" = fresh).
std::pair<Experiment, std::string> resolve_run(const RunArgs& a) {
  if (!a.resume) {
    if (a.config.empty())
      throw ConfigError("no config given: trainrun CONFIG.yaml (or --resume RUN_DIR)");
    Experiment exp = load_experiment(a.config, a.sets);
    if (!a.run_dir.empty()) exp.run_dir = a.run_dir;
    return {exp, ""};
  }
  // --resume [RUN_DIR|FILE]; with a CONFIG and no value, the config's run directory.
  std::string target = *a.resume;
  std::optional<Experiment> from_config;
  if (!a.config.empty()) {
    from_config = load_experiment(a.config, a.sets);
    if (!a.run_dir.empty()) from_config->run_dir = a.run_dir;
    if (target.empty()) target = from_config->run_dir;
  }
  if (target.empty()) throw ConfigError("--resume needs a run directory or a checkpoint file");
  std::string file;
  if (fs::is_directory(target)) {
    std::vector<std::string> warnings;
    auto latest = latest_good_checkpoint(target, &warnings);
    for (const auto& w : warnings) print_warning(w);
    if (!latest) {
      // `trainrun CONFIG --resume` on a run that never checkpointed starts it: what a requeued
      // batch job needs. A bare `--resume DIR` has nothing to start from.
      if (from_config) {
        fmt::print(stderr, "no checkpoint in {} yet: starting the run\n", target);
        return {*from_config, ""};
      }
      throw CheckpointError(
          fmt::format("no usable checkpoint in {}/checkpoints: nothing to resume (start it with "
                      "trainrun CONFIG)",
                      target));
    }
    file = *latest;
  } else if (fs::exists(target)) {
    file = target;
  } else {
    throw CheckpointError(
        fmt::format("--resume {}: no such run directory or checkpoint file", target));
  }
  Verdict v = verify_checkpoint(file);
  if (!v.ok) throw CheckpointError(fmt::format("checkpoint {} is damaged: {}", file, v.reason));
  CheckpointData ck = read_checkpoint(file);
  Experiment exp = parse_experiment(ck.state.config_yaml, file + ":/config", {});
  apply_overrides(exp, a.sets, /*resume=*/true);
  // The run directory is the one holding the checkpoint.
  exp.run_dir = fs::path(file).parent_path().parent_path().string();
  if (!a.run_dir.empty()) exp.run_dir = a.run_dir;
  return {exp, file};
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("trainrun") : p.string();
}

// The command line every rank runs: everything resolved, so ranks agree on what to do.
std::vector<std::string> rank_argv(const RunArgs& a, const Experiment& exp,
                                   const std::string& resume_file) {
  std::vector<std::string> argv = {self_exe(), "run"};
  if (!resume_file.empty()) {
    argv.insert(argv.end(), {"--resume", fs::absolute(resume_file).string()});
  } else {
    argv.push_back(fs::absolute(a.config).string());
  }
  for (const auto& s : a.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--run-dir", fs::absolute(exp.run_dir).string()});
  if (!a.profile.empty()) argv.insert(argv.end(), {"--profile", a.profile});
  return argv;
}

// Exit codes that a relaunch cannot fix (or that mean "done" / "stopped on purpose").
bool restartable(int code) {
  switch (code) {
    case kExitOk:
    case kExitUsage:
    case kExitData:
    case kExitCheckpoint:
    case kExitDevice:
    case kExitGaveUp:
    case kExitResumeMe:
    case kExitInterrupted:
      return false;
    default:
      return true;
  }
}

int64_t checkpoint_step(const std::string& file) {
  std::smatch m;
  const std::string name = fs::path(file).filename().string();
  return std::regex_search(name, m, std::regex(R"(step-(\d+)\.h5)")) ? std::stoll(m[1]) : 0;
}

// The launching trainrun: starts the job (mpirun for several ranks, or itself for one rank
// under supervision), and when it fails, relaunches it from the newest good checkpoint with a
// backoff, up to fault_tolerance.max_restarts times, recording every restart in the metrics.
int supervise(const RunArgs& a, const Experiment& exp, std::string resume_file) {
  const int world = exp.world_size();
  const auto& ft = exp.fault_tolerance;
  double backoff = ft.restart_backoff;
  int64_t last_failed_at = -1;
  for (int attempt = 0;; ++attempt) {
    LaunchPlan plan;
    if (world > 1) {
      plan = plan_launch(exp, rank_argv(a, exp, resume_file));
    } else {
      plan.argv = rank_argv(a, exp, resume_file);
      plan.env.push_back("TRAINRUN_SUPERVISED=1");
    }
    plan.env.push_back(fmt::format("TRAINRUN_RESTART_COUNT={}", attempt));
    if (a.dry_run) {
      fmt::print("{}\n", render_command(plan));
      return kExitOk;
    }
    std::string failure;
    const int code = run_launch(plan, &failure);
    if (!restartable(code)) return code;
    const std::string cause =
        failure.empty() ? fmt::format("the job exited with code {}", code) : failure;
    fmt::print(stderr, "error: {}\n", cause);
    if (ft.max_restarts == 0) return code;
    if (attempt >= ft.max_restarts) {
      fmt::print(stderr, "error: gave up after {} restart(s) (fault_tolerance.max_restarts)\n",
                 attempt);
      return kExitGaveUp;
    }
    std::vector<std::string> warnings;
    auto latest = latest_good_checkpoint(exp.run_dir, &warnings);
    for (const auto& w : warnings) print_warning(w);
    const int64_t from = latest ? checkpoint_step(*latest) : 0;
    if (from == last_failed_at) {
      fmt::print(stderr,
                 "error: the job failed again without getting past step {} (the newest "
                 "checkpoint): not restarting; fix the cause above, then trainrun --resume {}\n",
                 from, exp.run_dir);
      return kExitGaveUp;
    }
    last_failed_at = from;
    int64_t reached = from;
    try {
      for (const auto& row : read_metrics_jsonl(exp.run_dir, "train"))
        reached =
            std::max<int64_t>(reached, static_cast<int64_t>(std::get<double>(row.at(0).second)));
    } catch (const std::exception&) {
    }
    std::smatch m;
    const double rank =
        std::regex_search(cause, m, std::regex(R"(rank (\d+))")) ? std::stod(m[1]) : -1;
    {
      MetricsLog log(exp.run_dir, from);
      log.append("event", {{"step", double(from)},
                           {"event", std::string("restart")},
                           {"attempt", double(attempt + 1)},
                           {"rank", rank},
                           {"steps_lost", double(reached - from)},
                           {"cause", cause}});
      log.flush();
    }
    fmt::print(stderr, "restart {}/{} in {:.0f} s from {} (lost {} step(s)): {}\n", attempt + 1,
               ft.max_restarts, backoff, latest ? *latest : std::string("the start"),
               reached - from, cause);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(60.0, std::max(backoff * 2, 0.0));
    resume_file = latest ? *latest : "";
  }
}

// Refuses, before anything starts, a run whose planned memory per rank exceeds what this
// machine (CPU: MemAvailable shared by the ranks per node) or the GPU (table) has.
void check_memory(const Experiment& exp) {
  DevicePeak mem;
  if (exp.device == "cuda") {
    mem = device_peak(exp);
  } else {
    mem.name = "this machine";
    mem.memory = mem_available_bytes() / std::max(1, exp.distributed.nproc);
    mem.flops = mem.mem_bw = mem.link_bw = 1;  // only the memory figures are used here
  }
  if (mem.memory <= 0) return;  // unknown: nothing to compare against
  const Plan p = make_plan(exp, mem);
  if (!p.fits)
    throw ConfigError(fmt::format(
        "this run needs {:.2f} GiB per rank (parameters {:.2f}, gradients {:.2f}, optimizer "
        "{:.2f}, "
        "activations {:.2f}, workspace {:.2f}) but {} has {:.2f} GiB per rank; shrink "
        "train.micro_batch_size or the model, add ranks with distributed.zero=1, or see "
        "`trainrun plan`",
        p.bytes_total / 1073741824.0, p.bytes_params / 1073741824.0, p.bytes_grads / 1073741824.0,
        (exp.distributed.zero ? p.bytes_optimizer_zero1 : p.bytes_optimizer) / 1073741824.0,
        p.bytes_activations / 1073741824.0, p.bytes_workspace / 1073741824.0, mem.name,
        mem.memory / 1073741824.0));
}

int cmd_run(const RunArgs& a) {
  Tracer check_profile("", 0, a.profile);  // a bad --profile fails before anything starts
  auto [exp, resume_file] = resolve_run(a);
  check_memory(exp);
  const RankEnv env = detect_rank_env();
  const int world = exp.world_size();
  const bool supervised_child = std::getenv("TRAINRUN_SUPERVISED") != nullptr;
  if (!env.is_rank && !supervised_child && (world > 1 || exp.fault_tolerance.max_restarts > 0)) {
    validate_for_world(exp, world);
    return supervise(a, exp, resume_file);
  }
  validate_for_world(exp, env.is_rank ? env.size : 1);
  if (a.dry_run) {
    fmt::print("# dry run: {} rank(s), run directory {}\n{}", env.is_rank ? env.size : 1,
               exp.run_dir, to_yaml(exp));
    if (!resume_file.empty()) fmt::print("# would resume from {}\n", resume_file);
    return kExitOk;
  }
  RunOptions opts;
  opts.resume_file = resume_file;
  opts.profile = a.profile;
  return run_training(exp, opts);
}

void add_run_options(CLI::App* sub, RunArgs& a) {
  sub->add_option("config", a.config, "experiment YAML file")->type_name("CONFIG");
  sub->add_option("--set", a.sets, "override a config key: KEY=VALUE (VALUE is YAML)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option("--run-dir", a.run_dir, "run directory (default: run_dir, or runs/NAME)");
  sub->add_option("--resume", a.resume,
                  "resume from RUN_DIR (newest good checkpoint) or a checkpoint FILE; with CONFIG "
                  "and no value, the config's run directory (started fresh when it has none)")
      ->expected(0, 1)
      ->type_name("[RUN_DIR|FILE]");
  sub->add_flag("--dry-run", a.dry_run,
                "validate and print what would run (the mpirun command, or the resolved config)");
  sub->add_option("--profile", a.profile, "write Chrome traces for steps A:B into RUN_DIR/trace/")
      ->type_name("A:B");
}

}  // namespace

int cli_main(int argc, char** argv) {
  // `trainrun CONFIG ...` and `trainrun --resume ...` are `trainrun run ...`.
  static const std::set<std::string> kSubcommands = {
      "run", "validate", "plan", "report", "data", "sample", "inspect", "slurm", "k8s", "help"};
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() > 1 && !kSubcommands.count(args[1]) && args[1] != "--help" && args[1] != "-h" &&
      args[1] != "--version")
    args.insert(args.begin() + 1, "run");

  CLI::App app{kDescription, "trainrun"};
  app.set_version_flag("--version", std::string("trainrun ") + TRAINRUN_VERSION);
  app.require_subcommand(1);
  app.footer("Run `trainrun SUBCOMMAND --help` for each command's options.");

  RunArgs run_args;
  auto* run = app.add_subcommand("run", "train an experiment (the default command)");
  add_run_options(run, run_args);

  std::string validate_config;
  std::vector<std::string> validate_sets;
  auto* validate = app.add_subcommand("validate", "check a config and print it resolved");
  validate->add_option("config", validate_config, "experiment YAML file")->required();
  validate->add_option("--set", validate_sets, "override a config key: KEY=VALUE");

  std::string plan_config, plan_gpu;
  std::vector<std::string> plan_sets;
  bool plan_as_json = false;
  auto* plan = app.add_subcommand(
      "plan", "what a run will cost before it runs: parameters, FLOPs, memory, time");
  plan->add_option("config", plan_config, "experiment YAML file")->required();
  plan->add_option("--set", plan_sets, "override a config key: KEY=VALUE");
  plan->add_flag("--json", plan_as_json, "print JSON (for scripts)");
  plan->add_option("--gpu", plan_gpu, "plan for this GPU: A100, H100 or H200 (device cuda)");

  std::string report_dir, report_out;
  bool report_html = false;
  auto* report = app.add_subcommand("report", "summarise a run and plot its metrics");
  report->add_option("run_dir", report_dir, "run directory")->required();
  report->add_option("--out", report_out, "PNG to write (default RUN_DIR/report.png)");
  report->add_flag("--html", report_html, "also write RUN_DIR/report.html, a self-contained page");

  auto* data = app.add_subcommand("data", "data tools");
  data->require_subcommand(1);
  std::string prep_text, prep_out;
  double prep_val = 0.1;
  auto* prepare = data->add_subcommand("prepare", "turn a text file into byte-level token shards");
  prepare->add_option("text", prep_text, "input text file")->required();
  prepare->add_option("--out", prep_out, "output directory for train.bin and val.bin")->required();
  prepare->add_option("--val-fraction", prep_val, "fraction held out for validation")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));

  std::string sample_dir, sample_prompt;
  int sample_tokens = 200;
  double sample_temp = 0.8;
  uint64_t sample_seed = 1;
  auto* sample = app.add_subcommand("sample", "generate text from a run's newest checkpoint");
  sample->add_option("run", sample_dir, "run directory or checkpoint file")->required();
  sample->add_option("--prompt", sample_prompt, "text to continue");
  sample->add_option("--tokens", sample_tokens, "how many tokens (bytes) to generate")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  sample->add_option("--temperature", sample_temp, "sampling temperature; 0 = greedy")
      ->capture_default_str();
  sample->add_option("--seed", sample_seed, "sampling seed")->capture_default_str();

  std::string inspect_file;
  auto* inspect = app.add_subcommand("inspect", "describe a checkpoint and verify its checksums");
  inspect->add_option("checkpoint", inspect_file, "checkpoint .h5 file")->required();

  std::string slurm_config;
  std::vector<std::string> slurm_sets;
  SlurmOptions slurm_opts;
  bool slurm_submit_flag = false;
  auto* slurm = app.add_subcommand("slurm", "print (or --submit) an sbatch script for a config");
  slurm->add_option("config", slurm_config, "experiment YAML file")->required();
  slurm->add_option("--set", slurm_sets, "override a config key: KEY=VALUE");
  slurm->add_option("--nodes", slurm_opts.nodes, "nodes (default: distributed.nodes)");
  slurm->add_option("--ntasks-per-node", slurm_opts.ntasks_per_node,
                    "ranks per node (default: distributed.nproc)");
  slurm->add_option("--gpus-per-node", slurm_opts.gpus_per_node, "GPUs per node");
  slurm->add_option("--cpus-per-task", slurm_opts.cpus_per_task, "CPU cores per rank");
  slurm->add_option("--time", slurm_opts.time, "time limit, e.g. 24:00:00");
  slurm->add_option("--partition", slurm_opts.partition, "partition");
  slurm->add_option("--account", slurm_opts.account, "account");
  slurm
      ->add_option("--signal-seconds", slurm_opts.signal_seconds,
                   "seconds before the time limit to checkpoint and requeue")
      ->capture_default_str();
  slurm->add_option("--launcher", slurm_opts.launcher, "how ranks start: srun or mpirun")
      ->check(CLI::IsMember({"srun", "mpirun"}))
      ->capture_default_str();
  slurm->add_flag("--submit", slurm_submit_flag,
                  "write RUN_DIR/job.sbatch, submit it with sbatch and print the job id");

  std::string k8s_config;
  std::vector<std::string> k8s_sets;
  K8sOptions k8s_opts;
  auto* k8s = app.add_subcommand("k8s", "print a Kubeflow MPIJob manifest for kubectl apply");
  k8s->add_option("config", k8s_config, "experiment YAML file")->required();
  k8s->add_option("--set", k8s_sets, "override a config key: KEY=VALUE");
  k8s->add_option("--nodes", k8s_opts.nodes, "worker pods (default: distributed.nodes)");
  k8s->add_option("--gpus-per-node", k8s_opts.gpus_per_node, "GPUs per worker pod");
  k8s->add_option("--ranks-per-node", k8s_opts.ranks_per_node,
                  "ranks per worker pod (default: distributed.nproc)");
  k8s->add_option("--image", k8s_opts.image, "container image with trainrun")
      ->capture_default_str();
  k8s->add_option("--namespace", k8s_opts.namespace_, "namespace")->capture_default_str();
  k8s->add_option("--pvc", k8s_opts.pvc, "existing PersistentVolumeClaim for the run directory");
  k8s->add_option("--storage", k8s_opts.storage, "size of the claim created without --pvc")
      ->capture_default_str();
  k8s->add_option("--cpu", k8s_opts.cpu, "CPU limit per worker pod")->capture_default_str();
  k8s->add_option("--memory", k8s_opts.memory, "memory limit per worker pod")
      ->capture_default_str();

  try {
    std::vector<const char*> cargv;
    for (auto& s : args) cargv.push_back(s.c_str());
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  try {
    if (*run) return cmd_run(run_args);
    if (*validate) {
      Experiment exp = load_experiment(validate_config, validate_sets);
      validate_for_world(exp, exp.world_size());
      fmt::print("{}", to_yaml(exp));
      fmt::print(stderr, "{}: OK ({} rank(s))\n", validate_config, exp.world_size());
      return kExitOk;
    }
    if (*plan) {
      Experiment exp = load_experiment(plan_config, plan_sets);
      Plan p = make_plan(exp, device_peak(exp, plan_gpu));
      fmt::print("{}", plan_as_json ? plan_json(p) : plan_text(p));
      return kExitOk;
    }
    if (*report) {
      fmt::print("{}", report_text(report_dir));
      if (report_html) fmt::print("html: {}\n", write_report_html(report_dir));
      fmt::print("plot: {}\n", write_report_plot(report_dir, report_out));
      return kExitOk;
    }
    if (*prepare) {
      fmt::print("{}\n", prepare_text_shards(prep_text, prep_out, prep_val));
      return kExitOk;
    }
    if (*sample) {
      std::string text =
          sample_text(sample_dir, sample_prompt, sample_tokens, sample_temp, sample_seed);
      fmt::print("{}{}\n", sample_prompt, text);
      return kExitOk;
    }
    if (*slurm) {
      Experiment exp = load_experiment(slurm_config, slurm_sets);
      slurm_opts.trainrun_bin = self_exe();
      if (slurm_submit_flag) {
        fmt::print("{}\n", slurm_submit(exp, slurm_opts));
      } else {
        slurm_opts.config_path = fs::absolute(slurm_config).string();
        slurm_opts.sets = slurm_sets;
        fmt::print("{}", slurm_script(exp, slurm_opts));
      }
      return kExitOk;
    }
    if (*k8s) {
      fmt::print("{}", k8s_manifest(load_experiment(k8s_config, k8s_sets), k8s_opts));
      return kExitOk;
    }
    if (*inspect) {
      fmt::print("{}", describe_checkpoint(inspect_file));
      return verify_checkpoint(inspect_file).ok ? kExitOk : kExitCheckpoint;
    }
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return e.code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {}\n", e.what());
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace trainrun
