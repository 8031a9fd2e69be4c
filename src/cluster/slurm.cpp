// Slurm batch scripts: one script serves the first start and every requeue, because the job
// always runs `trainrun run CONFIG --resume` (which starts fresh when there is no checkpoint).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include "capture.h"
#include "shell_quote.h"
#include "trainrun/cluster/cluster.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/launch/supervisor.h"

namespace fs = std::filesystem;

namespace trainrun {

using cluster_detail::sbatch_value;
using cluster_detail::shell_quote;

namespace {

// Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and UNLIMITED/INFINITE (nullopt).
std::optional<long> time_limit_seconds(const std::string& t) {
  if (t == "UNLIMITED" || t == "INFINITE" || t == "unlimited" || t == "infinite")
    return std::nullopt;
  static const std::regex kDays(R"((\d+)-(\d+)(?::(\d+))?(?::(\d+))?)");
  static const std::regex kPlain(R"((\d+)(?::(\d+))?(?::(\d+))?)");
  std::smatch m;
  auto num = [&](int i) { return m[i].matched ? std::stol(m[i].str()) : 0L; };
  if (std::regex_match(t, m, kDays)) return ((num(1) * 24 + num(2)) * 60 + num(3)) * 60 + num(4);
  if (std::regex_match(t, m, kPlain)) {
    if (!m[2].matched) return num(1) * 60;           // minutes
    if (!m[3].matched) return num(1) * 60 + num(2);  // minutes:seconds
    return (num(1) * 60 + num(2)) * 60 + num(3);     // hours:minutes:seconds
  }
  throw ConfigError(fmt::format(
      "slurm --time '{}' is not a Slurm time limit: use MINUTES, HH:MM:SS or DAYS-HH:MM:SS "
      "(e.g. 24:00:00)",
      t));
}

// The options with defaults filled from the experiment, checked. Throws ConfigError.
SlurmOptions resolve(const Experiment& exp, SlurmOptions o) {
  if (o.nodes == 0) o.nodes = exp.distributed.nodes;
  if (o.ntasks_per_node == 0) o.ntasks_per_node = exp.distributed.nproc;
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw ConfigError(msg);
  };
  need(o.nodes >= 1, fmt::format("slurm --nodes {}: need at least 1 node", o.nodes));
  need(o.ntasks_per_node >= 1,
       fmt::format("slurm --ntasks-per-node {}: need at least 1 rank per node", o.ntasks_per_node));
  need(o.gpus_per_node >= 0,
       fmt::format("slurm --gpus-per-node {}: must be 0 (no GPUs) or more", o.gpus_per_node));
  need(o.cpus_per_task >= 0,
       fmt::format("slurm --cpus-per-task {}: must be 0 (unset) or more", o.cpus_per_task));
  need(o.gpus_per_node == 0 || o.ntasks_per_node <= o.gpus_per_node,
       fmt::format("slurm: {} ranks per node but only {} GPUs per node: each rank drives its own "
                   "GPU; set --ntasks-per-node {} or --gpus-per-node {}",
                   o.ntasks_per_node, o.gpus_per_node, o.gpus_per_node, o.ntasks_per_node));
  // Slurm keeps the warning time in 16 bits.
  need(o.signal_seconds >= 1 && o.signal_seconds <= 65535,
       fmt::format("slurm --signal-seconds {}: must be 1..65535 (the warning before the time "
                   "limit that lets the run checkpoint)",
                   o.signal_seconds));
  need(o.launcher == "srun" || o.launcher == "mpirun",
       fmt::format("slurm --launcher '{}': use srun or mpirun", o.launcher));
  need(!o.trainrun_bin.empty(), "slurm: the trainrun binary path is empty");
  need(!o.config_path.empty(), "slurm: the config path is empty");
  if (!o.time.empty()) {
    const auto secs = time_limit_seconds(o.time);
    need(!secs || *secs > o.signal_seconds,
         fmt::format("slurm --time {} is not longer than --signal-seconds {}: the job would be "
                     "told to stop as it starts; lengthen --time or shorten --signal-seconds",
                     o.time, o.signal_seconds));
  }
  return o;
}

std::string sbatch_extra_line(const std::string& line, size_t i) {
  std::string s = line;
  if (s.rfind("#SBATCH", 0) == 0) s = s.substr(7);
  const auto b = s.find_first_not_of(" \t");
  s = b == std::string::npos ? "" : s.substr(b);
  if (s.empty() || s[0] != '-' || s.find_first_of("\r\n") != std::string::npos)
    throw ConfigError(fmt::format(
        "slurm.extra[{}] '{}': each entry is one sbatch option such as --constraint=a100 or "
        "--mail-type=END",
        i, line));
  return s;
}

std::string absolute(const std::string& p) {
  return fs::absolute(p).lexically_normal().string();
}

}  // namespace

namespace {

// fault_tolerance.max_restarts under Slurm: a failure trainrun's supervisor would restart (a
// crash, a killed rank, a watchdog abort) requeues the job while Slurm's restart count, which
// every requeue raises (preemptions too), is below max_restarts. The supervisor's "failed again
// at the same checkpoint" rule has no equivalent here: the count is the only bound.
template <typename Line>
void restart_on_failure(int max_restarts, const Line& line) {
  if (max_restarts <= 0) return;
  std::vector<std::string> final_codes;  // failures a restart cannot help
  for (int code = 1; code < 256; ++code)
    if (code != kExitResumeMe && !restartable(code)) final_codes.push_back(std::to_string(code));
  line(fmt::format("    case $rc in {}) ;; *)", fmt::join(final_codes, "|")));
  line(fmt::format("      if (( ${{SLURM_RESTART_COUNT:-0}} < {} )); then", max_restarts));
  line(fmt::format(
      "        echo \"trainrun: failed with exit code $rc; requeueing job ${{SLURM_JOB_ID}} "
      "(restart $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) of {}, fault_tolerance.max_restarts)\"",
      max_restarts));
  line("        if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi");
  line("      fi ;;");
  line("    esac");
}

}  // namespace

std::string slurm_script(const Experiment& exp, const SlurmOptions& in) {
  const SlurmOptions o = resolve(exp, in);
  const int world = o.nodes * o.ntasks_per_node;
  // The job's shape may differ from the config's: the ranks must agree with it.
  std::vector<std::string> sets = o.sets;
  if (o.nodes != exp.distributed.nodes)
    sets.push_back(fmt::format("distributed.nodes={}", o.nodes));
  if (o.ntasks_per_node != exp.distributed.nproc)
    sets.push_back(fmt::format("distributed.nproc={}", o.ntasks_per_node));
  validate_for_world(exp, world);

  const std::string run_dir = absolute(exp.run_dir.empty() ? "runs/" + exp.name : exp.run_dir);

  std::string s;
  auto line = [&s](const std::string& l) { s += l + "\n"; };
  auto sbatch = [&](const std::string& opt) { line("#SBATCH " + opt); };

  line("#!/bin/bash");
  line(fmt::format("# Slurm batch job for trainrun experiment '{}', written by `trainrun slurm`.",
                   exp.name));
  line("# Submit with `sbatch THIS_FILE` once the run directory exists (`trainrun slurm --submit`");
  line("# creates it and submits). The same script serves the first start and every requeue:");
  line("# trainrun resumes from the run directory's newest good checkpoint, or starts fresh.");
  line(fmt::format("# {} s before the time limit Slurm sends USR1; trainrun then saves a",
                   o.signal_seconds));
  line("# checkpoint and exits 75, and this script requeues the job.");
  sbatch("--job-name=" +
         sbatch_value(o.job_name.empty() ? exp.name : o.job_name, "the experiment name"));
  if (!o.array.empty())
    sbatch(fmt::format("--array=0-{}{}", o.array.size() - 1,
                       o.array_throttle > 0 ? fmt::format("%{}", o.array_throttle) : ""));
  sbatch(fmt::format("--nodes={}", o.nodes));
  sbatch(fmt::format("--ntasks-per-node={}", o.ntasks_per_node));
  if (o.gpus_per_node > 0) sbatch(fmt::format("--gpus-per-node={}", o.gpus_per_node));
  if (o.cpus_per_task > 0) sbatch(fmt::format("--cpus-per-task={}", o.cpus_per_task));
  if (!o.time.empty()) sbatch("--time=" + sbatch_value(o.time, "slurm --time"));
  if (!o.partition.empty()) sbatch("--partition=" + sbatch_value(o.partition, "slurm --partition"));
  if (!o.account.empty()) sbatch("--account=" + sbatch_value(o.account, "slurm --account"));
  sbatch("--requeue");
  sbatch(fmt::format("--signal=B:USR1@{}", o.signal_seconds));
  sbatch("--output=" +
         sbatch_value(o.output.empty() ? run_dir + "/slurm-%j.out" : o.output, "--output"));
  sbatch("--open-mode=append");
  // Relative data paths in the config mean what they meant where `trainrun slurm` ran.
  sbatch("--chdir=" + sbatch_value(fs::current_path().string(), "the working directory"));
  for (size_t i = 0; i < exp.slurm.extra.size(); ++i)
    sbatch(sbatch_extra_line(exp.slurm.extra[i], i));
  line("");
  line("set -uo pipefail  # not -e: the step's exit code decides what happens next");
  line("");
  line(
      "echo \"trainrun: job ${SLURM_JOB_ID} restart ${SLURM_RESTART_COUNT:-0} on $(hostname) at "
      "$(date '+%F %T')\"");
  if (exp.logging.prometheus_port > 0)
    line(fmt::format(
        "echo \"trainrun: metrics for Prometheus at http://$(hostname):{}/metrics (rank 0 runs "
        "on this node, the allocation's first)\"",
        exp.logging.prometheus_port));
  line("");
  line("# One OpenMP thread per core Slurm gave each rank: more threads than cores makes every");
  line("# rank spin against the others. Since Slurm 22.05 srun no longer inherits --cpus-per-task");
  line("# from sbatch: SRUN_CPUS_PER_TASK passes it on.");
  line("if [[ -n \"${SLURM_CPUS_PER_TASK:-}\" ]]; then");
  line("  export OMP_NUM_THREADS=\"$SLURM_CPUS_PER_TASK\"");
  line("  export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"");
  line("elif [[ -z \"${OMP_NUM_THREADS:-}\" && -n \"${SLURM_CPUS_ON_NODE:-}\" ]]; then");
  line(
      fmt::format("  export OMP_NUM_THREADS=$(( SLURM_CPUS_ON_NODE / {0} > 0 ? SLURM_CPUS_ON_NODE "
                  "/ {0} : 1 ))",
                  o.ntasks_per_node));
  line("fi");
  line("");

  std::vector<std::string> cmd;
  if (o.launcher == "srun") {
    line("# srun starts every rank; --mpi=pmix is the wire-up Debian's Open MPI understands.");
    line("# --kill-on-bad-exit: a rank that dies ends the step at once, instead of leaving the");
    line("# others waiting in a collective until the watchdog's step_timeout.");
    cmd = {"srun", "--mpi=pmix", "--kill-on-bad-exit=1"};
  } else {
    line("# mpirun reads the allocation from Slurm. Open MPI refuses root without these.");
    line("if [[ $(id -u) -eq 0 ]]; then");
    line("  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    line("fi");
    cmd = {"mpirun", "-np", std::to_string(world), "--bind-to", "none"};
  }
  for (const auto& a : {o.trainrun_bin, std::string("run"), o.config_path, std::string("--resume")})
    cmd.push_back(a);
  if (o.array.empty()) cmd.insert(cmd.end(), {"--run-dir", run_dir});
  for (const auto& kv : sets) cmd.insert(cmd.end(), {"--set", kv});
  std::string words;
  for (const auto& w : cmd) {
    if (!words.empty()) words += ' ';
    words += shell_quote(w);
  }
  if (!o.array.empty()) {
    line("# This array task's point: its run directory and its own values, after the shared ones.");
    line("case \"${SLURM_ARRAY_TASK_ID:-}\" in");
    for (size_t i = 0; i < o.array.size(); ++i) {
      std::string point = "--run-dir " + shell_quote(o.array[i].run_dir);
      for (const auto& kv : o.array[i].sets) point += " --set " + shell_quote(kv);
      line(fmt::format("  {}) point=({}) ;;", i, point));
    }
    line(
        "  *) echo \"trainrun: SLURM_ARRAY_TASK_ID=${SLURM_ARRAY_TASK_ID:-unset} is no point of "
        "this sweep\" >&2; exit 2 ;;");
    line("esac");
    words += " \"${point[@]}\"";
  }
  line("step=(" + words + ")");
  line("");
  line(
      "# Slurm's B:USR1 warning (and the TERM of a time limit or `scontrol requeue`) reaches only");
  line("# this shell: pass it on to the ranks. It goes on as USR1, which srun and mpirun forward");
  line("# unchanged (mpirun answers TERM by killing its ranks); trainrun treats both alike.");
  line("step_pid=");
  line("interrupted=0");
  line("forward() {");
  line("  interrupted=1");
  line("  echo \"trainrun: batch shell got SIG$1: asking the ranks to checkpoint and stop\"");
  line("  if [[ -n \"$step_pid\" ]] && kill -0 \"$step_pid\" 2>/dev/null; then");
  line("    kill -USR1 \"$step_pid\" 2>/dev/null");
  line("  fi");
  line("}");
  line("trap 'forward USR1' USR1");
  line("trap 'forward TERM' TERM");
  line("");
  line("\"${step[@]}\" &");
  line("step_pid=$!");
  line("# A trapped signal interrupts `wait`; wait again for the step's real exit code.");
  line("while :; do");
  line("  interrupted=0");
  line("  wait \"$step_pid\"");
  line("  rc=$?");
  line("  (( interrupted && rc > 128 )) || break");
  line("done");
  line("");
  line("case $rc in");
  line("  0)");
  line("    echo \"trainrun: finished\"");
  line("    exit 0 ;;");
  line("  75)");
  line("    # Checkpointed on request: run again from that checkpoint (restart count + 1).");
  line("    echo \"trainrun: checkpoint saved, requeueing job ${SLURM_JOB_ID}\"");
  line("    if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi");
  line("    echo \"trainrun: scontrol requeue failed: resubmit this script to continue\" >&2");
  line("    exit 75 ;;");
  line("  *)");
  restart_on_failure(exp.fault_tolerance.max_restarts, line);
  line("    echo \"trainrun: failed with exit code $rc\" >&2");
  line("    exit \"$rc\" ;;");
  line("esac");
  return s;
}

std::string slurm_submit(const Experiment& exp_in, SlurmOptions opts) {
  // The submitted config carries the job's shape and absolute run directory, so the job does
  // not depend on the submitter's working directory or --set flags.
  Experiment exp = exp_in;
  exp.run_dir = absolute(exp.run_dir.empty() ? "runs/" + exp.name : exp.run_dir);
  const fs::path config = fs::path(exp.run_dir) / "config.submitted.yaml";
  const fs::path script = fs::path(exp.run_dir) / "job.sbatch";
  opts.config_path = config.string();
  opts.sets.clear();
  const SlurmOptions shape = resolve(exp, opts);  // refuse bad options before writing anything
  exp.distributed.nodes = shape.nodes;
  exp.distributed.nproc = shape.ntasks_per_node;
  // Everything that can refuse goes first: the script (its options, the world size) and
  // sbatch itself. Only then are the files written.
  const std::string script_text = slurm_script(exp, opts);
  const std::string config_text = to_yaml(exp);
  require_sbatch("`trainrun slurm` without --submit prints the script");

  std::error_code ec;
  fs::create_directories(exp.run_dir, ec);
  if (ec)
    throw RunDirError(fmt::format("cannot create run directory {}: {}", exp.run_dir, ec.message()));
  // Replaced whole (a link in the run directory is replaced, never written through).
  auto write = [](const fs::path& p, const std::string& text) {
    try {
      replace_file(p.string(), text);
    } catch (const Error& e) {
      throw RunDirError(fmt::format("{}: check the run directory", e.what()));
    }
  };
  write(config, config_text);
  write(script, script_text);
  return sbatch_submit(script.string());
}

void require_sbatch(const std::string& instead) {
  bool found = false;
  const auto probe = cluster_detail::run_capture({"sbatch", "--version"}, &found);
  if (!found)
    throw LaunchError(fmt::format(
        "cannot run sbatch ({}): install slurm-client or run on a login node; nothing was "
        "written ({})",
        probe.err, instead));
}

std::string sbatch_submit(const std::string& script) {
  bool found = false;
  const auto r = cluster_detail::run_capture({"sbatch", "--parsable", script}, &found);
  if (!found)
    throw LaunchError(fmt::format("cannot run sbatch ({}); the script is in {}", r.err, script));
  auto trim = [](std::string t) {
    const auto b = t.find_first_not_of(" \t\r\n");
    const auto e = t.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  };
  if (r.exit_code != 0)
    throw LaunchError(fmt::format("sbatch {} failed (exit {}): {}", script, r.exit_code,
                                  trim(r.err.empty() ? r.out : r.err)));
  // --parsable prints "JOBID" or "JOBID;CLUSTER".
  std::string id = trim(r.out);
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw LaunchError(
        fmt::format("sbatch {} printed no job id: '{}' {}", script, trim(r.out), trim(r.err)));
  return id;
}

}  // namespace trainrun
