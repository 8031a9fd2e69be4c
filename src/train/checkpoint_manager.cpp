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
      be_(be),
      ps_(ps),
      dp_(dp),
      policy_(exp.checkpoint.every, exp.train.steps),
      config_yaml_(to_yaml(exp)) {
  if (comm.rank() == 0 || exp.checkpoint.sharded)
    writer_ = std::make_unique<Checkpointer>(exp.run_dir, exp.checkpoint.keep_last,
                                             exp.checkpoint.async, comm.rank());
}

CheckpointManager::~CheckpointManager() = default;

std::string CheckpointManager::location(int64_t step) const {
  return exp_.checkpoint.sharded ? sharded_checkpoint_path(exp_.run_dir, step)
                                 : checkpoint_path(exp_.run_dir, step);
}

void CheckpointManager::wait() {
  if (writer_) writer_->wait();
}

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
  const std::string refused = exp_.checkpoint.sharded ? save_sharded(st) : save_single(st);
  if (refused.empty()) newest_ = location(st.step);
  return refused;
}

// Rank 0 writes the full state; it alone sees the snapshot, so it tells the others whether it
// refused one. Rank 0 names the tensor at fault; the others learn only that it refused.
std::string CheckpointManager::save_single(const TrainState& state) {
  std::string refused;
  if (std::optional<CheckpointData> ck = snapshot(state)) {
    try {
      writer_->save(std::move(*ck));  // checks finiteness on the host copy, before writing
      if (!exp_.checkpoint.async) writer_->wait();
    } catch (const NonFiniteCheckpoint& e) {
      refused = e.what();
    }
  }
  if (comm_.size() > 1) {
    char bad = refused.empty() ? 0 : 1;
    comm_.broadcast_bytes(&bad, 1, 0);
    if (bad && refused.empty())
      refused = fmt::format(
          "not writing checkpoint {}: rank 0 found a non-finite weight or "
          "optimizer moment",
          location(state.step));
  }
  comm_.barrier();
  return refused;
}

// Every rank writes its shard; they agree on the outcome (each saw only its own part), and
// rank 0 commits. A rank that could not write makes every rank fail with the write error's
// exit code, so the job ends at once instead of waiting for rank 0's commit.
std::string CheckpointManager::save_sharded(const TrainState& state) {
  const std::string path = location(state.step);
  std::string refused, failed;
  try {
    writer_->save_shard(shard_snapshot(state));  // refuses a non-finite shard synchronously
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
                                      "shard (its log says why)",
                                      path, who));
  if (*worst == 1)
    return !refused.empty() ? refused
                            : fmt::format(
                                  "not writing checkpoint {}: rank {} found a non-finite "
                                  "weight or optimizer moment in its shard",
                                  path, who);
  if (!exp_.checkpoint.async && comm_.rank() == 0) writer_->commit(state.step, comm_.size());
  comm_.barrier();
  return "";
}

// This rank's shard_of range of the weights and moments; nothing is gathered.
CheckpointShard CheckpointManager::shard_snapshot(const TrainState& state) {
  CheckpointShard s =
      writer_->reuse_shard();  // the last save's buffers: no page faults, no zeroing
  s.state = state;
  s.params = ps_.entries();
  s.flat_size = ps_.numel();
  s.rank = comm_.rank();
  s.range = shard_of(s.flat_size, comm_.size(), comm_.rank());
  const int64_t n = s.range.size();
  s.weights.resize(static_cast<size_t>(n));
  s.adam_m.resize(static_cast<size_t>(n));
  s.adam_v.resize(static_cast<size_t>(n));
  if (n > 0)
    be_.copy(Tensor(s.weights.data(), DType::f32, Device::cpu, {n}),
             ps_.params().slice(s.range.begin, {n}));
  dp_.copy_moments_range(s.range, s.adam_m.data(), s.adam_v.data());
  return s;
}

// The full state on rank 0, the writing rank; the other ranks only send their optimizer shards.
std::optional<CheckpointData> CheckpointManager::snapshot(const TrainState& state) {
  if (comm_.rank() != 0) {
    dp_.gather_optimizer_state(nullptr);
    return std::nullopt;
  }
  const int64_t n = ps_.numel();
  CheckpointData ck = writer_->reuse_data();  // the last save's buffers: no page faults, no zeroing
  ck.state = state;
  ck.params = ps_.entries();
  ck.weights.resize(static_cast<size_t>(n));
  be_.copy(Tensor(ck.weights.data(), DType::f32, Device::cpu, {n}), ps_.params());
  dp_.gather_optimizer_state(&ck);
  return ck;
}

TrainState CheckpointManager::restore(const std::string& file) {
  // Only this rank's range of the moments (all of them without ZeRO-1).
  CheckpointData ck = read_checkpoint(file, dp_.shard());
  if (static_cast<int64_t>(ck.weights.size()) != ps_.numel())
    throw CheckpointError(fmt::format("checkpoint {} holds {} parameters but the model has {}",
                                      file, ck.weights.size(), ps_.numel()));
  const auto mine = ps_.entries();
  for (size_t i = 0; i < mine.size(); ++i)
    if (i >= ck.params.size() || ck.params[i].name != mine[i].name ||
        ck.params[i].offset != mine[i].offset || ck.params[i].shape != mine[i].shape)
      throw CheckpointError(fmt::format("checkpoint {} does not match the model at parameter {}",
                                        file, mine[i].name));
  be_.copy(ps_.params(), Tensor(ck.weights.data(), DType::f32, Device::cpu, {ps_.numel()}));
  ps_.refresh_compute();
  dp_.restore_optimizer_state(ck);
  newest_ = file;
  return ck.state;
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
