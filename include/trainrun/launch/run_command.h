// `trainrun run`: resolve what to run (a config, or the checkpoint to resume), refuse what
// cannot fit, then either supervise the job (the launching process) or be one of its ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// The run command's arguments, as given.
struct RunRequest {
  std::string config;                 // CONFIG.yaml ("" with a bare --resume)
  std::vector<std::string> sets;      // KEY=VALUE overrides
  std::string run_dir;                // --run-dir ("" = the config's)
  std::optional<std::string> resume;  // present: resume; empty value: the config's run_dir
  bool renew = false;                 // --new: archive an earlier run in the run directory
  bool dry_run = false;
  std::string profile;  // --profile A:B
};

// How a run uses its run directory (docs/fault-tolerance.md, "The run directory").
enum class RunDirUse {
  start,    // a new run: from a config, or from a checkpoint outside the directory
  restart,  // `CONFIG --resume` where no checkpoint exists yet: the same run, started again
  resume,   // continue the run that lives in the directory, from one of its checkpoints
};

// What `trainrun run` will run.
struct ResolvedRun {
  Experiment exp;
  std::string resume_file;  // the checkpoint to start from; "" = a fresh start
  int64_t resume_step = 0;  // its step
  RunDirUse use = RunDirUse::start;
  std::vector<std::string> notes;  // what the owner tells the user (a new run directory, ...)
};

// With --resume, the experiment is the checkpoint's own config (overrides applied, and the keys
// a CONFIG given alongside changes, when a resume may change them) and the run directory the one
// holding it; a checkpoint file outside any run directory starts a new one (--run-dir, else
// RUN_DIR-from-step-N beside the run that wrote it). Throws ConfigError (nothing to run, or a
// CONFIG that does not describe the resumed run) or CheckpointError (nothing to resume).
ResolvedRun resolve_run(const RunRequest& request);

// `text` with control characters escaped (\x1b, \r, \u009b; newlines and tabs stay): error
// messages quote config values and rank messages, which may hold anything, and must not drive
// the terminal they are printed on.
std::string printable(const std::string& text);
// Prints "error: MESSAGE" (printable) on stderr: the one way errors reach the terminal.
void print_error(const std::string& message);

// What one rank runs once everything is resolved (the trainer; injected so that launch does not
// depend on it). Returns the rank's exit code.
using RankMain = std::function<int(const Experiment& exp, const std::string& resume_file)>;

// The whole command: resolve, check, claim the run directory (the job's owner: the launching
// process, or rank 0 of a job srun or mpirun started), then supervise (several ranks, or
// restarts asked for) or run as a rank, recording a failure record if the rank fails. Returns
// the exit code; errors propagate as exceptions (errors.h).
int run_command(const RunRequest& request, const RankMain& rank_main);

}  // namespace trainrun
