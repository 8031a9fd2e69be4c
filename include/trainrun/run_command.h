// `trainrun run`: resolve what to run (a config, or the checkpoint to resume), refuse what
// cannot fit, then either supervise the job (the launching process) or be one of its ranks.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/experiment.h"

namespace trainrun {

// The run command's arguments, as given.
struct RunRequest {
  std::string config;                 // CONFIG.yaml ("" with a bare --resume)
  std::vector<std::string> sets;      // KEY=VALUE overrides
  std::string run_dir;                // --run-dir ("" = the config's)
  std::optional<std::string> resume;  // present: resume; empty value: the config's run_dir
  bool dry_run = false;
  std::string profile;  // --profile A:B
};

// The experiment to run and the checkpoint to resume from ("" = a fresh start). With --resume,
// the experiment is the checkpoint's own config (overrides applied) and the run directory the
// one holding it. Throws ConfigError (nothing to run) or CheckpointError (nothing to resume).
std::pair<Experiment, std::string> resolve_run(const RunRequest& request);

// Refuses (ConfigError, with the numbers) a run whose planned memory per rank exceeds what
// this machine (CPU: MemAvailable shared by the node's ranks) or the GPU (table) has.
void check_memory(const Experiment& exp);

// What one rank runs once everything is resolved (the trainer; injected so that launch does not
// depend on it). Returns the rank's exit code.
using RankMain = std::function<int(const Experiment& exp, const std::string& resume_file)>;

// The whole command: resolve, check memory, then supervise (several ranks, or restarts asked
// for) or run as a rank, recording a failure record if the rank fails. Returns the exit code;
// errors propagate as exceptions (errors.h).
int run_command(const RunRequest& request, const RankMain& rank_main);

}  // namespace trainrun
