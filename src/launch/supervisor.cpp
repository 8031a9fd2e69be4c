// The launching trainrun: starts the job (mpirun for several ranks, or itself for one rank
// under supervision), and when it fails, relaunches it from the newest good checkpoint with a
// backoff, up to fault_tolerance.max_restarts times, recording every restart in the metrics.
#include "trainrun/launch/supervisor.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <variant>

#include "host.h"
#include "host_probe.h"
#include "stop_relay.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/device_mesh.h"
#include "trainrun/core/errors.h"
#include "trainrun/launch/launch.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/runtime/heartbeats.h"
#include "trainrun/runtime/omp_wait.h"
#include "trainrun/runtime/rank_env.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

// The command line every rank runs: everything resolved, so ranks agree on what to do.
std::vector<std::string> rank_argv(const RunRequest& r, const Experiment& exp,
                                   const std::string& resume_file) {
  std::vector<std::string> argv = {self_executable(), "run"};
  if (!resume_file.empty()) {
    argv.insert(argv.end(), {"--resume", fs::absolute(resume_file).string()});
  } else {
    argv.push_back(fs::absolute(r.config).string());
  }
  for (const auto& s : r.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--run-dir", fs::absolute(exp.run_dir).string()});
  if (!r.profile.empty()) argv.insert(argv.end(), {"--profile", r.profile});
  return argv;
}

LaunchPlan attempt_plan(const RunRequest& r, const Experiment& exp, const std::string& resume_file,
                        int attempt) {
  LaunchPlan plan;
  if (exp.world_size() > 1) {
    plan = plan_launch(exp, rank_argv(r, exp, resume_file));
  } else {
    plan.argv = rank_argv(r, exp, resume_file);
    plan.env = {"TRAINRUN_SUPERVISED=1", "TRAINRUN_LAUNCHED_BY=trainrun"};
    plan.single_rank = true;
    if (auto wait = omp_wait_setting(exp)) plan.env.push_back(*wait);
  }
  plan.env.push_back(fmt::format("{}={}", kRestartCountVar, attempt));
  // mpirun passes its own environment only to the ranks on this host: ranks elsewhere need
  // the count (one-shot fault injection, restart events) forwarded by name.
  if (!plan.single_rank) plan.argv.insert(plan.argv.begin() + 1, {"-x", kRestartCountVar});
  return plan;
}

// After a hang on several hosts: which hosts still answer. A link lost between hosts leaves
// every rank alive and waiting, which the watchdog cannot tell apart from a stuck network.
void name_unreachable_hosts(const Experiment& exp) {
  const DistributedConfig& d = exp.distributed;
  if (d.nodes < 2 || d.hostfile.empty()) return;
  constexpr double kProbeSeconds = 5;
  const std::vector<std::string> hosts = hostfile_hosts(d.hostfile);
  const std::vector<std::string> silent = unreachable_hosts(hosts, kProbeSeconds);
  if (silent.empty()) {
    fmt::print(stderr,
               "every host of {} answered over the remote shell within {:g} s: the hosts are "
               "up, so the network the ranks use (or one of them) is stuck\n",
               d.hostfile, kProbeSeconds);
    return;
  }
  for (const std::string& host : silent) {
    const auto at = std::find(hosts.begin(), hosts.end(), host) - hosts.begin();
    const int first = static_cast<int>(at) * d.nproc, last = first + d.nproc - 1;
    print_error(fmt::format(
        "host {} did not answer over the remote shell within {:g} s: it is cut off or down, "
        "with rank{} {} (the hang's cause; the other hosts answered)",
        host, kProbeSeconds, d.nproc > 1 ? "s" : "",
        d.nproc > 1 ? fmt::format("{}-{}", first, last) : std::to_string(first)));
  }
}

// One launch: a clean slate of failure records and heartbeats (the launch bound waits for a
// new one), the job, then the verdict.
JobOutcome run_attempt(const LaunchPlan& plan, const std::string& run_dir) {
  clear_failure_records(run_dir);
  clear_heartbeats(run_dir);
  MpirunFailure said;
  const int code = run_launch(plan, &said);
  return judge_job(
      code, code == kExitOk ? std::vector<FailureRecord>{} : read_failure_records(run_dir), said);
}

int64_t checkpoint_step(const std::string& file) {
  long long step = 0;
  const std::string name = fs::path(file).filename().string();
  return std::sscanf(name.c_str(), "step-%lld.h5", &step) == 1 ? step : 0;
}

// The furthest step the failed attempt logged (at least `from`): what the restart loses.
int64_t furthest_logged_step(const std::string& run_dir, int64_t from) {
  int64_t reached = from;
  try {
    for (const auto& row : read_metrics_jsonl(run_dir, "train"))
      reached =
          std::max<int64_t>(reached, static_cast<int64_t>(std::get<double>(row.at(0).second)));
  } catch (const std::exception&) {
  }
  return reached;
}

void log_restart(const std::string& run_dir, int64_t from, int attempt, const JobOutcome& o,
                 int64_t steps_lost) {
  MetricsLog log(run_dir, from);
  MetricRow row = event_row(from, MetricEvent::restart);
  row.insert(row.end(), {{"attempt", double(attempt)},
                         {"rank", double(o.rank)},
                         {"steps_lost", double(steps_lost)},
                         {"cause", o.cause}});
  if (!o.host.empty()) row.emplace_back("host", o.host);
  log.append("event", row);
  log.flush();
}

// After a restartable failure: the checkpoint to relaunch from ("" = the start), or the exit
// code when restarting cannot help. `last_failed_at` is the checkpoint step the previous
// attempt started from.
std::variant<std::string, int> next_start(const Experiment& exp, const JobOutcome& o, int attempt,
                                          int64_t* last_failed_at) {
  const auto& ft = exp.fault_tolerance;
  if (ft.max_restarts == 0) return o.code;
  if (attempt >= ft.max_restarts) {
    fmt::print(stderr, "error: gave up after {} restart(s) (fault_tolerance.max_restarts)\n",
               attempt);
    return int{kExitGaveUp};
  }
  std::vector<std::string> warnings;
  auto latest = latest_good_checkpoint(exp.run_dir, &warnings);
  for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w);
  const int64_t from = latest ? checkpoint_step(*latest) : 0;
  // A job that could not be launched (a host unreachable) got nowhere through no fault of the
  // step it would start from: it counts against max_restarts, not as a repeated crash.
  if (o.not_launched) return latest.value_or("");
  if (from == *last_failed_at) {
    fmt::print(stderr,
               "error: the job failed again without getting past step {} (the newest "
               "checkpoint): not restarting; fix the cause above, then trainrun --resume {}\n",
               from, exp.run_dir);
    return int{kExitGaveUp};
  }
  *last_failed_at = from;
  return latest.value_or("");
}

// A stop request that came while no job was running: nothing to checkpoint, the newest
// checkpoint on disk is where a resume goes on.
int stopped_between_attempts(const Experiment& exp, int attempt) {
  if (attempt == 0)
    fmt::print(stderr,
               "stopped by signal {} during setup, before the job started: nothing new to "
               "checkpoint, the run's checkpoints stay as they were\n",
               StopRelay::requested());
  else
    fmt::print(stderr,
               "stopped by signal {} between attempts, before relaunching; resume with `trainrun "
               "--resume {}`\n",
               StopRelay::requested(), exp.run_dir);
  return StopRelay::stop_code();
}

// How a job ends that was asked to stop: never restarted. Finished is finished; a rank the
// relayed signal killed before it could handle it (during its start) stopped too.
int after_stop(const JobOutcome& o) {
  if (o.code == kExitOk || o.code == kExitResumeMe || o.code == kExitInterrupted) return o.code;
  if (o.code == 128 + SIGUSR1 || o.code == 128 + SIGUSR2) return StopRelay::stop_code();
  print_error(o.cause);
  return o.code;
}

}  // namespace

int supervise(const RunRequest& request, const Experiment& exp, std::string resume_file,
              const std::function<void()>& claim) {
  const auto& ft = exp.fault_tolerance;
  double backoff = std::min(60.0, ft.restart_backoff);  // documented: at most 60 s
  int64_t last_failed_at = -1;
  const StopRelay relay;  // from here to the end, stop signals are requests to the job
  for (int attempt = 0;; ++attempt) {
    const LaunchPlan plan = attempt_plan(request, exp, resume_file, attempt);
    if (request.dry_run) {
      // validate_for_world checked that tp and dp_replicate divide the ranks.
      fmt::print("# device mesh: {} ({} ranks), distributed.zero={}\n{}\n",
                 MeshShape::of(exp.world_size(), exp.distributed.dp_replicate, exp.distributed.tp)
                     .describe(),
                 exp.world_size(), exp.distributed.zero, render_command(plan));
      return kExitOk;
    }
    if (attempt == 0) claim();  // the first command is known to be valid: take the directory
    if (StopRelay::requested()) return stopped_between_attempts(exp, attempt);
    const JobOutcome outcome = run_attempt(plan, exp.run_dir);
    if (StopRelay::requested()) return after_stop(outcome);
    if (outcome.code == kExitHang) name_unreachable_hosts(exp);
    if (!restartable(outcome.code)) {
      if (outcome.code != kExitOk && !outcome.cause.empty() && !outcome.from_record)
        print_error(outcome.cause);  // a rank that recorded its failure printed it already
      return outcome.code;
    }
    print_error(outcome.cause);
    const auto next = next_start(exp, outcome, attempt, &last_failed_at);
    if (const int* code = std::get_if<int>(&next)) return *code;
    resume_file = std::get<std::string>(next);
    const int64_t from = last_failed_at;
    const int64_t lost = furthest_logged_step(exp.run_dir, from) - from;
    log_restart(exp.run_dir, from, attempt + 1, outcome, lost);
    fmt::print(stderr, "restart {}/{} in {:.0f} s from {} (lost {} step(s)): {}\n", attempt + 1,
               ft.max_restarts, backoff, resume_file.empty() ? "the start" : resume_file, lost,
               printable(outcome.cause));
    if (StopRelay::sleep_unless_stopped(backoff)) return stopped_between_attempts(exp, attempt + 1);
    backoff = std::min(60.0, std::max(backoff * 2, 0.0));
  }
}

}  // namespace trainrun
