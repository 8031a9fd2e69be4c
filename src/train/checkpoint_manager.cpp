#include "checkpoint_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "trainrun/config/config.h"

namespace trainrun {

CheckpointManager::CheckpointManager(const Experiment& exp, Communicator& comm, Backend& be,
                                     ParamStore& ps, DataParallel& dp)
    : exp_(exp),
      comm_(comm),
      model_(ps, be, shard_of(ps.numel(), comm.size(), comm.rank())),
      components_{&model_, &dp},
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
std::string CheckpointManager::save(const TrainState& state, int bad_in_row,
                                    const std::function<void()>& before_snapshot) {
  // Every rank judged the same allreduced values: all skip the snapshot together.
  if (bad_in_row > 0)
    return fmt::format(
        "not writing checkpoint {}: the last {} step(s) had a non-finite loss or "
        "gradient norm",
        location(state.step), bad_in_row);
  if (before_snapshot) before_snapshot();
  TrainState st = state;
  st.world_size = comm_.size();
  st.config_yaml = config_yaml_;
  const std::string path = location(st.step);
  std::string refused, failed;
  try {
    writer_->save(snapshot(st));  // refuses a non-finite snapshot synchronously
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
  if (!exp_.checkpoint.async && comm_.rank() == 0) writer_->commit(st.step, comm_.size());
  comm_.barrier();
  newest_ = path;
  return "";
}

// What this rank writes: every component's slices, copied into the last save's buffer (no page
// faults, no zeroing).
RankSnapshot CheckpointManager::snapshot(const TrainState& state) {
  RankSnapshot snap = writer_->reuse();
  snap.state = state;
  snap.rank = comm_.rank();
  StateDict sd;
  for (Stateful* c : components_) c->state_dict(sd);
  take_snapshot(sd, &snap);
  return snap;
}

TrainState CheckpointManager::restore(const std::string& file) {
  TrainState state;
  std::unique_ptr<StateSource> in = open_checkpoint(file, &state);
  for (Stateful* c : components_) c->load_state_dict(*in);
  newest_ = file;
  return state;
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
