// `trainrun run` from resolved arguments to an exit code: the launching process supervises;
// a rank (started by mpirun, srun, or a supervising trainrun) runs the trainer and, if it fails,
// leaves a failure record for the supervisor.
#include "trainrun/run_command.h"

#include <fmt/format.h>

#include <cstdlib>

#include "trainrun/config.h"
#include "trainrun/errors.h"
#include "trainrun/failure_record.h"
#include "trainrun/launch.h"
#include "trainrun/supervisor.h"
#include "trainrun/trace.h"

namespace trainrun {
namespace {

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

int run_rank(const RunRequest& request, const Experiment& exp, const std::string& resume_file,
             const RankEnv& env, bool supervised, const RankMain& rank_main) {
  validate_for_world(exp, env.is_rank ? env.size : 1);
  if (request.dry_run) {
    fmt::print("# dry run: {} rank(s), run directory {}\n{}", env.is_rank ? env.size : 1,
               exp.run_dir, to_yaml(exp));
    if (!resume_file.empty()) fmt::print("# would resume from {}\n", resume_file);
    return kExitOk;
  }
  // Alone and unsupervised, nobody reads a record: the error on the terminal is the report.
  if (!env.is_rank && !supervised) return rank_main(exp, resume_file);
  return run_recorded(exp, resume_file, env.is_rank ? env.rank : 0, rank_main);
}

}  // namespace

int run_command(const RunRequest& request, const RankMain& rank_main) {
  Tracer check_profile("", 0, request.profile);  // a bad --profile fails before anything starts
  auto [exp, resume_file] = resolve_run(request);
  check_memory(exp);
  const RankEnv env = detect_rank_env();
  const bool supervised = std::getenv("TRAINRUN_SUPERVISED") != nullptr;  // our child
  const int world = exp.world_size();
  if (!env.is_rank && !supervised && (world > 1 || exp.fault_tolerance.max_restarts > 0)) {
    validate_for_world(exp, world);
    return supervise(request, exp, resume_file);
  }
  return run_rank(request, exp, resume_file, env, supervised, rank_main);
}

}  // namespace trainrun
