#include "checkpoint_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "trainrun/config/config.h"

namespace trainrun {

CheckpointManager::CheckpointManager(const Experiment& exp, Communicator& comm,
                                     std::vector<Stateful*> components)
    : exp_(exp),
      comm_(comm),
      components_(std::move(components)),
      policy_(exp.checkpoint.every, exp.train.steps),
      config_yaml_(to_yaml(exp)),
      writer_(std::make_unique<Checkpointer>(exp.run_dir, exp.checkpoint.keep_last,
                                             exp.checkpoint.async, comm.rank())) {}

CheckpointManager::~CheckpointManager() = default;

std::string CheckpointManager::location(int64_t step) const {
  return checkpoint_path(exp_.run_dir, step);
}

void CheckpointManager::wait() {
  writer_->wait();
}

// Every rank writes its file; they agree on the outcome (each saw only its own part), and rank 0
// commits. A rank that could not write makes every rank fail with the write error's exit code,
// so the job ends at once instead of waiting for rank 0's commit.
std::string CheckpointManager::save(int64_t step, int bad_in_row,
                                    const std::function<void()>& before_snapshot) {
  // Every rank judged the same allreduced values: all skip the snapshot together.
  if (bad_in_row > 0)
    return fmt::format(
        "not writing checkpoint {}: the last {} step(s) had a non-finite loss or "
        "gradient norm",
        location(step), bad_in_row);
  if (before_snapshot) before_snapshot();
  const std::string path = location(step);
  std::string refused, failed;
  try {
    RankSnapshot snap = snapshot();
    if (const int64_t at = snap.summary().step; at != step)  // a component's bug, not the run's
      throw std::logic_error(fmt::format("checkpoint of step {} holds step {}", step, at));
    writer_->save(std::move(snap));  // refuses a non-finite snapshot synchronously
  } catch (const NonFiniteCheckpoint& e) {
    refused = e.what();
  } catch (const CheckpointError& e) {  // this write, or (async) the previous one
    failed = e.what();
  }
  const char mine = !failed.empty() ? 2 : !refused.empty() ? 1 : 0;
  std::vector<char> all(static_cast<size_t>(comm_.size()));
  comm_.all_gather_bytes(&mine, 1, all.data());
  const auto worst = std::max_element(all.begin(), all.end());
  const int who = static_cast<int>(worst - all.begin());
  if (*worst == 2)
    throw CheckpointWriteError(
        !failed.empty() ? failed
                        : fmt::format("cannot write checkpoint {}: rank {} could not write its "
                                      "file (its log says why)",
                                      path, who));
  if (*worst == 1)
    return !refused.empty() ? refused
                            : fmt::format(
                                  "not writing checkpoint {}: rank {} found a non-finite "
                                  "weight or optimizer moment in its part",
                                  path, who);
  if (!exp_.checkpoint.async && comm_.rank() == 0) writer_->commit(step, comm_.size());
  comm_.barrier();
  newest_ = path;
  return "";
}

// What this rank writes: every component's state, copied into the last save's buffer (no page
// faults, no zeroing).
RankSnapshot CheckpointManager::snapshot() {
  RankSnapshot snap = writer_->reuse();
  snap.rank = comm_.rank();
  snap.config_yaml = config_yaml_;
  StateDict sd;
  sd.put(state_name::world_size, int64_t{comm_.size()});
  for (Stateful* c : components_) c->state_dict(sd);
  take_snapshot(sd, &snap);
  return snap;
}

TrainState CheckpointManager::restore(const std::string& file) {
  TrainState summary;
  std::unique_ptr<StateSource> in = open_checkpoint(file, &summary);
  for (Stateful* c : components_) c->load_state_dict(*in);
  newest_ = file;
  return summary;
}

std::optional<std::string> CheckpointManager::newest_good() {
  wait();
  comm_.barrier();
  std::vector<std::string> warnings;
  auto file = latest_good_checkpoint(exp_.run_dir, &warnings);
  for (const auto& w : warnings) spdlog::warn("{}", w);
  return file;
}

}  // namespace trainrun
