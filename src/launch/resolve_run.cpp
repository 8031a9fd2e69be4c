// What `trainrun run` runs: a config as given, or the checkpoint a --resume points at (a run
// directory's newest good one, or a file) with the config stored inside it, and how the run
// uses its directory (run_command.h, RunDirUse).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "run_dir.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/config/config.h"
#include "trainrun/config/schema.h"
#include "trainrun/core/errors.h"
#include "trainrun/hf/hf_import.h"
#include "trainrun/launch/run_command.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

// A config's file paths are relative to the directory trainrun starts in. A run records them
// absolute (config.yaml, every checkpoint's config), so that --resume and `sample` from any
// other directory read the files the run trained on. A stored relative path (a run recorded
// before this) is resolved the same way, so a config and a checkpoint still compare equal.
void absolute_paths(Experiment& exp) {
  for (std::string* p : {&exp.data.train, &exp.data.val, &exp.data.text, &exp.data.tokenizer,
                         &exp.distributed.hostfile, &exp.model.init_from})
    if (!p->empty()) *p = fs::absolute(*p).lexically_normal().string();
  for (MixSource& m : exp.data.mix)
    for (std::string* p : {&m.path, &m.val})
      if (!p->empty()) *p = fs::absolute(*p).lexically_normal().string();
}

Experiment from_config(const RunRequest& r) {
  Experiment exp = load_experiment(r.config, r.sets, hf_model_source);
  if (!r.run_dir.empty()) exp.run_dir = r.run_dir;
  absolute_paths(exp);
  return exp;
}

// `--resume RUN_DIR/checkpoints` names the run by its folder of checkpoints: the run.
std::string run_of_target(const std::string& target) {
  fs::path p = fs::path(target).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "RUN_DIR/checkpoints/"
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (p.filename() == "checkpoints" && fs::is_directory(p, ec) && is_run_directory(parent.string()))
    return parent.string();
  return target;
}

// The checkpoint file a --resume target names; nullopt when it is a run directory without one.
std::optional<std::string> checkpoint_of(const std::string& target) {
  if (is_run_directory(target)) {
    std::vector<std::string> warnings;
    auto latest = latest_good_checkpoint(target, &warnings);
    for (const auto& w : warnings) fmt::print(stderr, "warning: {}\n", w);
    return latest;
  }
  if (fs::exists(target)) return target;
  throw CheckpointError(
      fmt::format("--resume {}: no such run directory or checkpoint file", target));
}

bool same_dir(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) ||
         fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
}

// The keys of `other` that a resume may not change and that differ from `run`'s, as
// "KEY is RUN'S there, OTHER'S in WHERE"; with `taken`, the resumable ones as "KEY=OTHER'S".
std::vector<std::string> fixed_differences(const Experiment& run, const Experiment& other,
                                           const std::string& where,
                                           std::vector<std::string>* taken = nullptr) {
  std::vector<std::string> fixed;
  for (const ConfigKey& k : config_keys()) {
    if (k.key == "run_dir") continue;  // resolved separately
    const std::string mine = config_value(other, k.key);
    const std::string stored = config_value(run, k.key);
    if (mine == stored) continue;
    if (!k.resumable)
      fixed.push_back(fmt::format("{} is {} there, {} in {}", k.key, stored, mine, where));
    else if (taken)
      taken->push_back(fmt::format("{}={}", k.key, mine));
  }
  return fixed;
}

// A CONFIG given with --resume must describe the run being resumed: the keys a resume may
// change are taken from it (and said), any other difference is refused.
void reconcile(ResolvedRun& run, const Experiment& configured, const std::string& config_path) {
  std::vector<std::string> taken;
  const std::vector<std::string> refused =
      fixed_differences(run.exp, configured, config_path, &taken);
  if (!refused.empty()) {
    std::string list;
    for (const auto& s : refused) list += "\n  " + s;
    throw ConfigError(fmt::format(
        "{} does not describe the run in {}:{}\n--resume continues a run with the model, data "
        "and seed it started with: start a new run without --resume (in another --run-dir, or "
        "with --new), or resume without CONFIG (trainrun --resume {})",
        config_path, run.exp.run_dir, list, run.exp.run_dir));
  }
  if (taken.empty()) return;
  apply_overrides(run.exp, taken, /*resume=*/true);
  std::string list;
  for (const auto& s : taken) list += (list.empty() ? "" : ", ") + s;
  run.notes.push_back(fmt::format("resume: taking {} from {} (the checkpoint had other values)",
                                  list, config_path));
}

// A checkpoint copied into RUN_DIR/checkpoints from another run would be adopted with its config
// and data: refused unless its config is the run's (RUN_DIR/config.yaml, which every start of the
// run writes) on every key a resume cannot change.
void require_own_checkpoint(const std::string& dir, const std::string& file,
                            const Experiment& stored) {
  const fs::path config = fs::path(dir) / "config.yaml";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return;  // nothing to compare with
  Experiment run;
  try {
    run = load_experiment(config.string(), {});
  } catch (const Error&) {
    return;  // unreadable: the start itself says so
  }
  absolute_paths(run);
  const std::vector<std::string> diff = fixed_differences(run, stored, file);
  if (diff.empty()) return;
  std::string list;
  for (const auto& s : diff) list += "\n  " + s;
  throw CheckpointError(fmt::format(
      "checkpoint {} is not one of the run in {}: its config differs from {} where a resume "
      "cannot change it, so it came from another run:{}\nmove it out of {}/checkpoints and "
      "resume the run (trainrun --resume {}), or start a new run from it in another directory "
      "(trainrun --resume {} --run-dir NEW_DIR)",
      file, dir, config.string(), list, dir, dir, file));
}

// Resuming in its own run directory from a checkpoint older than the run's newest good one would
// replace the steps after it (their checkpoints and metrics rows): the run's history is the
// user's, so that is refused, saying how to continue the run or branch off it instead.
void require_newest(const std::string& dir, const std::string& file, int64_t step) {
  for (const std::string& path : list_checkpoints(dir)) {
    std::error_code ec;
    if (fs::equivalent(path, file, ec)) return;  // the newest ones before it did not verify
    const Verdict v = verify_checkpoint(path);
    if (!v.ok || v.step <= step) continue;
    throw RunDirError(fmt::format(
        "checkpoint {} (step {}) is older than the run's newest checkpoint {} (step {}): "
        "resuming from it in {} would replace steps {} to {} of that run (their checkpoints and "
        "metrics). Continue the run from its newest checkpoint with `trainrun --resume {}`, "
        "branch a new run from step {} into another directory with `trainrun --resume {} "
        "--run-dir NEW_DIR` (copies nothing; {} stays as it is), or start the run over with "
        "`trainrun {}/config.yaml --run-dir {} --new` (moves its files into {}/archive-TIME/)",
        file, step, path, v.step, dir, step + 1, v.step, dir, step, file, dir, dir, dir, dir));
  }
}

ResolvedRun resume_from(const RunRequest& r, const std::string& file) {
  Verdict v = verify_checkpoint(file);
  if (!v.ok)
    throw CheckpointError(fmt::format("checkpoint {} is {}: {}", file, v.problem(), v.reason));
  CheckpointData ck = read_checkpoint(file);
  ResolvedRun run;
  run.exp = parse_experiment(ck.state.config_yaml, file + ":/config", {});
  apply_overrides(run.exp, r.sets, /*resume=*/true);
  absolute_paths(run.exp);
  run.resume_file = file;
  run.resume_step = ck.state.step;
  const std::optional<std::string> home = run_dir_of_checkpoint(file);
  if (home && (r.run_dir.empty() || same_dir(r.run_dir, *home))) {
    require_own_checkpoint(*home, file, run.exp);
    require_newest(*home, file, run.resume_step);
    run.exp.run_dir = *home;  // continue the run that wrote it
    run.use = RunDirUse::resume;
    return run;
  }
  // A checkpoint from elsewhere (or a branch into another --run-dir) starts a new run directory
  // instead of adopting whatever directory the file happens to lie in.
  run.use = RunDirUse::start;
  if (!r.run_dir.empty()) {
    run.exp.run_dir = r.run_dir;
  } else {
    const std::string from = run.exp.run_dir.empty() ? "runs/" + run.exp.name : run.exp.run_dir;
    run.exp.run_dir =
        fmt::format("{}-from-step-{}", fs::path(from).lexically_normal().string(), run.resume_step);
    run.notes.push_back(fmt::format(
        "{} lies outside a run directory: starting the new run directory {} from it (choose "
        "another with --run-dir)",
        file, run.exp.run_dir));
  }
  return run;
}

}  // namespace

ResolvedRun resolve_run(const RunRequest& r) {
  if (!r.resume) {
    if (r.config.empty())
      throw ConfigError("no config given: trainrun CONFIG.yaml (or --resume RUN_DIR)");
    return {from_config(r), "", 0, RunDirUse::start, {}};
  }
  // --resume [RUN_DIR|FILE]; with a CONFIG and no value, the config's run directory.
  std::string target = run_of_target(*r.resume);
  std::optional<Experiment> configured;
  if (!r.config.empty()) {
    configured = from_config(r);
    if (target.empty()) target = configured->run_dir;
  }
  if (target.empty()) throw ConfigError("--resume needs a run directory or a checkpoint file");
  // `trainrun CONFIG --resume` before its run directory exists starts the run: a job's first
  // start on a new volume (`trainrun k8s`'s launcher on a new claim, a batch job submitted
  // without --submit). A --resume that names a path that is not there is a mistake.
  if (std::error_code ec; configured && r.resume->empty() && !fs::exists(target, ec)) {
    ResolvedRun run{*configured, "", 0, RunDirUse::start, {}};
    run.notes.push_back(fmt::format("no run directory {} yet: starting the run", target));
    return run;
  }
  if (const std::optional<std::string> file = checkpoint_of(target)) {
    ResolvedRun run = resume_from(r, *file);
    if (configured) reconcile(run, *configured, r.config);
    return run;
  }
  // `trainrun CONFIG --resume` on a run that never checkpointed starts it: what a requeued
  // batch job needs. A bare `--resume DIR` has nothing to start from.
  if (configured) {
    if (!r.resume->empty() && r.run_dir.empty()) configured->run_dir = target;
    ResolvedRun run{*configured, "", 0, RunDirUse::restart, {}};
    run.notes.push_back(
        fmt::format("no checkpoint in {} yet: starting the run", configured->run_dir));
    return run;
  }
  // A run killed before its first checkpoint has nothing to resume: it starts again from step 0
  // as `CONFIG --resume` (above), whose CONFIG every rank and restart is launched with.
  const fs::path recorded = fs::path(target) / "config.yaml";
  std::error_code ec;
  if (list_checkpoints(target).empty() && is_run_directory(target) &&
      fs::is_regular_file(recorded, ec))
    throw CheckpointError(fmt::format(
        "no checkpoint in {}/checkpoints: the run ended before its first one, so there is nothing "
        "to resume; start it again from step 0 with `trainrun {} --run-dir {} --resume` (the "
        "config it recorded; the earlier attempt's files move into {}/archive-TIME/)",
        target, recorded.string(), target, target));
  if (!list_checkpoints(target).empty())
    throw CheckpointError(fmt::format(
        "no usable checkpoint in {}/checkpoints: none of its checkpoints verifies (see the "
        "warnings above; `trainrun inspect FILE` says more), so nothing can be resumed; start the "
        "run over with `trainrun {} --run-dir {} --new` (moves its files into {}/archive-TIME/)",
        target, fs::is_regular_file(recorded, ec) ? recorded.string() : std::string("CONFIG"),
        target, target));
  throw CheckpointError(fmt::format(
      "no checkpoint and no recorded config in {}: nothing to resume; start a run there with "
      "`trainrun CONFIG --run-dir {}`",
      target, target));
}

}  // namespace trainrun
