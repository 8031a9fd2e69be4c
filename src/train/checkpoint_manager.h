// CheckpointManager: everything about checkpoints the step loop does not need to know. The loop
// asks due() and says save() or restore(); this component collects the named state of every
// stateful component (the model's parameters, the optimizer's moments: state_dict.h) into this
// rank's snapshot, has the ranks agree on an outcome only some of them saw (a non-finite value, a
// failed write), has rank 0 commit, keeps the run's newest checkpoint, and hands a checkpoint
// being restored to each component, which reads the slices its layout needs (torchtitan's
// checkpointer is the model). It knows no layout: a component that shards its state declares
// its own slices.
//
// Never during a streak of bad steps, nor with a non-finite weight or moment: the newest
// checkpoint must always be one a rollback or a resume can go on from.
//
// Collectives: save() and newest_good(); every rank makes the same calls with the same agreed
// values. Thread safety: the step loop's thread only (the writer's own thread is the
// Checkpointer's). Borrows the communicator, backend, parameter store and data-parallel
// strategy (the optimizer's state); they must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_policy.h"
#include "data_parallel.h"
#include "model_state.h"
#include "trainrun/backend/backend.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"
#include "trainrun/model/params.h"

namespace trainrun {

class CheckpointManager {
 public:
  // Opens this rank's writer (rank 0's first clears what an interrupted write left).
  CheckpointManager(const Experiment& exp, Communicator& comm, Backend& be, ParamStore& ps,
                    DataParallel& dp);
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // `step` optimizer steps are done; `stop` is the stop request every rank agreed on.
  bool due(int64_t step, bool stop) const { return policy_.save_after(step, stop); }

  // Collective: saves `state` as the checkpoint of state.step (the world size and resolved
  // config filled in here) unless it is not fit to be one: `bad_in_row` agreed bad steps, or a
  // non-finite weight or moment. Returns why it was not written, "" when it was; empty on every
  // rank or on none. `before_snapshot` runs first when it will be saved (the metrics flush, so
  // metrics.h5 holds every row up to the checkpoint). A rank that could not write its shard
  // makes every rank throw CheckpointWriteError, so the job ends at once.
  std::string save(const TrainState& state, int bad_in_row,
                   const std::function<void()>& before_snapshot);
  // Not collective: opens `file` (any format), has every component read what it needs from it
  // (each checks it matches: names and shapes), and returns the run's state as saved.
  TrainState restore(const std::string& file);
  // Collective: waits for every rank's writes, then finds the newest checkpoint that verifies
  // (logging the newer ones that do not); nullopt when there is none.
  std::optional<std::string> newest_good();
  // Waits for a background write; rethrows its error.
  void wait();

  // The newest checkpoint this run wrote or restored; "" for none.
  const std::string& newest() const { return newest_; }
  // Where the checkpoint of `step` goes.
  std::string location(int64_t step) const;

 private:
  RankSnapshot snapshot(const TrainState& state);

  const Experiment& exp_;
  Communicator& comm_;
  ModelState model_;
  std::vector<Stateful*> components_;  // the model, the optimizer (dp_)
  CheckpointPolicy policy_;
  std::string config_yaml_;
  std::unique_ptr<Checkpointer> writer_;
  std::string newest_;
};

}  // namespace trainrun
