// What `trainrun run` runs: a config as given, or the checkpoint a --resume points at (a run
// directory's newest good one, or a file) with the config stored inside it.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "trainrun/checkpoint.h"
#include "trainrun/config.h"
#include "trainrun/errors.h"
#include "trainrun/run_command.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

Experiment from_config(const RunRequest& r) {
  Experiment exp = load_experiment(r.config, r.sets);
  if (!r.run_dir.empty()) exp.run_dir = r.run_dir;
  return exp;
}

// The checkpoint file a --resume target names; nullopt when it is a run directory without one.
std::optional<std::string> checkpoint_of(const std::string& target) {
  if (fs::is_directory(target)) {
    std::vector<std::string> warnings;
    auto latest = latest_good_checkpoint(target, &warnings);
    for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w);
    return latest;
  }
  if (fs::exists(target)) return target;
  throw CheckpointError(
      fmt::format("--resume {}: no such run directory or checkpoint file", target));
}

std::pair<Experiment, std::string> resume_from(const RunRequest& r, const std::string& file) {
  Verdict v = verify_checkpoint(file);
  if (!v.ok) throw CheckpointError(fmt::format("checkpoint {} is damaged: {}", file, v.reason));
  CheckpointData ck = read_checkpoint(file);
  Experiment exp = parse_experiment(ck.state.config_yaml, file + ":/config", {});
  apply_overrides(exp, r.sets, /*resume=*/true);
  // The run directory is the one holding the checkpoint.
  exp.run_dir = fs::path(file).parent_path().parent_path().string();
  if (!r.run_dir.empty()) exp.run_dir = r.run_dir;
  return {exp, file};
}

}  // namespace

std::pair<Experiment, std::string> resolve_run(const RunRequest& r) {
  if (!r.resume) {
    if (r.config.empty())
      throw ConfigError("no config given: trainrun CONFIG.yaml (or --resume RUN_DIR)");
    return {from_config(r), ""};
  }
  // --resume [RUN_DIR|FILE]; with a CONFIG and no value, the config's run directory.
  std::string target = *r.resume;
  std::optional<Experiment> configured;
  if (!r.config.empty()) {
    configured = from_config(r);
    if (target.empty()) target = configured->run_dir;
  }
  if (target.empty()) throw ConfigError("--resume needs a run directory or a checkpoint file");
  const std::optional<std::string> file = checkpoint_of(target);
  if (file) return resume_from(r, *file);
  // `trainrun CONFIG --resume` on a run that never checkpointed starts it: what a requeued
  // batch job needs. A bare `--resume DIR` has nothing to start from.
  if (configured) {
    fmt::print(stderr, "no checkpoint in {} yet: starting the run\n", target);
    return {*configured, ""};
  }
  throw CheckpointError(
      fmt::format("no usable checkpoint in {}/checkpoints: nothing to resume (start it with "
                  "trainrun CONFIG)",
                  target));
}

}  // namespace trainrun
