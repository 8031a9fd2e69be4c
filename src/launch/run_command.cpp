// `trainrun run` from resolved arguments to an exit code: the job's owner checks the data and
// claims the run directory; the launching process supervises; a rank (started by mpirun, srun,
// or a supervising trainrun) runs the trainer and, if it fails, leaves a failure record for the
// supervisor.
#include "trainrun/launch/run_command.h"

#include <fmt/format.h>
#include <pthread.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "run_dir.h"
#include "run_provenance.h"
#include "stop_relay.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/launch/launch.h"
#include "trainrun/launch/supervisor.h"
#include "trainrun/obs/metrics_server.h"
#include "trainrun/obs/trace.h"
#include "trainrun/preflight/preflight.h"
#include "trainrun/runtime/failure_record.h"
#include "trainrun/runtime/omp_wait.h"
#include "trainrun/runtime/rank_env.h"
#include "trainrun/runtime/stop_signals.h"

namespace trainrun {
namespace {

// A rank a launching trainrun started (through mpirun, or as its one supervised child): the
// launcher owns the run directory and relays stop signals as SIGUSR1/SIGUSR2.
bool launched_by_trainrun() {
  const char* v = std::getenv("TRAINRUN_LAUNCHED_BY");
  return v && std::strcmp(v, "trainrun") == 0;
}

// The process that owns the job's run directory: the launching trainrun, or rank 0 of a job
// that srun or a user's mpirun started.
bool owns_run_dir(const RankEnv& env) {
  if (launched_by_trainrun()) return false;
  return !env.is_rank || env.rank == 0;
}

// A rank holds back the signals a launcher relays (SIGUSR1, and SIGUSR2 from trainrun) until
// the trainer takes them: their default action would end a rank still starting up.
void hold_relayed_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  if (launched_by_trainrun()) sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// `run()`'s exit code, or the code of the Error it throws, ended in `record` either way.
template <class Run>
int recorded_attempt(std::optional<AttemptRecord>& record, Run&& run) {
  try {
    const int code = run();
    if (record) record->end(code);
    return code;
  } catch (const Error& e) {
    if (record) record->end(e.code());
    throw;
  } catch (const std::exception&) {
    if (record) record->end(kExitFailure);
    throw;
  }
}

// Runs rank_main, recording how it failed: a thrown error, or a non-zero exit code (gave up,
// stopped by a signal: the supervisor takes 75/130 from the ranks, not from mpirun).
int run_recorded(const Experiment& exp, const std::string& resume_file, int rank,
                 const RankMain& rank_main) {
  arm_failure_record(exp.run_dir, rank);
  int code = kExitOk;
  try {
    code = rank_main(exp, resume_file);
  } catch (const Error& e) {
    record_failure(e.code(), "error", e.what());
    throw;
  } catch (const std::exception& e) {
    record_failure(kExitFailure, "internal error", e.what());
    throw;
  }
  if (code != kExitOk) {
    const bool stop = code == kExitResumeMe || code == kExitInterrupted;
    record_failure(code, stop ? "stopped" : "exit", exit_code_meaning(code));
  }
  return code;
}

int run_rank(const RunRequest& request, const ResolvedRun& run, const RankEnv& env, bool supervised,
             bool owner, const RankMain& rank_main) {
  const Experiment& exp = run.exp;
  if (request.dry_run) {
    fmt::print("# dry run: {} rank(s), run directory {}\n{}", env.is_rank ? env.size : 1,
               exp.run_dir, to_yaml(exp));
    if (!run.resume_file.empty()) fmt::print("# would resume from {}\n", run.resume_file);
    return kExitOk;
  }
  std::optional<RunDirLock> lock;  // held until the rank is done
  std::optional<AttemptRecord> attempt;
  if (owner) {
    lock = claim_run_dir(exp.run_dir, run.use, request.renew);
    attempt.emplace(exp);
  }
  return recorded_attempt(attempt, [&] {
    // Alone and unsupervised, nobody reads a record: the error on the terminal is the report.
    if (!env.is_rank && !supervised) return rank_main(exp, run.resume_file);
    return run_recorded(exp, run.resume_file, env.is_rank ? env.rank : 0, rank_main);
  });
}

// `--resume RUN_DIR` of a run that is going on: say so before reading checkpoints that its
// owner may be writing and pruning right now.
void refuse_a_run_in_use(const RunRequest& r) {
  if (r.resume && !r.resume->empty() && is_run_directory(*r.resume)) check_not_in_use(*r.resume);
}

// A metrics port rank 0 could not bind is refused before anything is written, when rank 0 runs
// on this host (one node). Rank 0 binds it again for real and says the same if it lost a race.
void check_metrics_port(const Experiment& exp) {
  if (exp.logging.prometheus_port != 0 && exp.distributed.nodes == 1)
    MetricsServer::start(exp.logging.prometheus_address, exp.logging.prometheus_port);
}

// A resume whose checkpoint is already at or past train.steps has nothing to train.
bool nothing_to_train(const ResolvedRun& run) {
  return !run.resume_file.empty() && run.exp.train.steps <= run.resume_step;
}

}  // namespace

int run_command(const RunRequest& request, const RankMain& rank_main) {
  const RankEnv env = detect_rank_env();
  const bool supervised = std::getenv("TRAINRUN_SUPERVISED") != nullptr;  // our child
  if (env.is_rank || supervised) hold_relayed_signals();
  // A rank or a supervised child runs the trainer in this process: its stop signals are taken
  // from here on, so a stop while a checkpoint is verified or the data is scanned ends it at
  // once (stop_signals.h). Before any thread starts.
  if (env.is_rank || supervised) install_stop_signals();
  Tracer check_profile("", 0, request.profile);  // a bad --profile fails before anything starts
  const bool owner = owns_run_dir(env);
  if (owner) refuse_a_run_in_use(request);
  const ResolvedRun run = resolve_run(request);
  const Experiment& exp = run.exp;
  const int world = exp.world_size();
  const bool supervising =
      !env.is_rank && !supervised && (world > 1 || exp.fault_tolerance.max_restarts > 0);
  // A process that trains needs libgomp loaded with the wait policy: this may re-execute it.
  if (!supervising && !request.dry_run) ensure_omp_wait_policy(exp);
  if (owner)
    for (const std::string& note : run.notes) fmt::print(stderr, "{}\n", printable(note));
  if (nothing_to_train(run)) {
    if (owner)
      fmt::print(stderr,
                 "resumed from {} at step {}, which is already at or past train.steps={}: "
                 "nothing to train (--set train.steps=N above {} trains further)\n",
                 run.resume_file, run.resume_step, exp.train.steps, run.resume_step);
    return kExitOk;
  }
  check_memory(exp);
  check_open_files(open_files_need(exp, supervising));
  validate_for_world(exp, supervising ? world : (env.is_rank ? env.size : 1));
  std::optional<StopRelay> relay;  // the launcher takes stop signals from here on
  if (supervising)
    relay.emplace();
  else
    install_stop_signals();  // a lone process: before the data check, which may take long
  if (owner) {
    check_data(exp);  // before anything is written in the run directory
    check_metrics_port(exp);
    // Said, not enforced: a dry run writes nothing, so a filled directory (the quick start's,
    // say) must not stop a look at what would run there.
    if (request.dry_run)
      if (const std::string objection = run_dir_objection(exp.run_dir, run.use, request.renew);
          !objection.empty())
        fmt::print(stderr, "--dry-run: a real run would be refused here (exit 73): {}\n",
                   printable(objection));
  }
  if (!supervising) return run_rank(request, run, env, supervised, owner, rank_main);
  std::optional<RunDirLock> lock;  // held for the life of the job, across restarts
  std::optional<AttemptRecord> attempt;
  return recorded_attempt(attempt, [&] {
    return supervise(request, exp, run.resume_file, [&] {
      lock = claim_run_dir(exp.run_dir, run.use, request.renew);
      attempt.emplace(exp);
    });
  });
}

}  // namespace trainrun
