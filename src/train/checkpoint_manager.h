// CheckpointManager: everything about checkpoints the step loop does not need to know. The loop
// asks due() and says save() or restore(); this component collects the named state of every
// stateful component it was given (the model's parameters, the optimizer's moments, the data
// stream's cursor, the health counters, the run's progress: state_dict.h) into this rank's
// snapshot, adds the one fact that is its own (how many ranks write the checkpoint), has the
// ranks agree on an outcome only some of them saw (a non-finite value, a failed write), has rank
// 0 commit, keeps the run's newest checkpoint, and hands a checkpoint being restored to each
// component, which reads what its layout needs (torchtitan's checkpointer is the model). It knows
// no layout and no component's insides.
//
// Never during a streak of bad steps, nor with a non-finite weight or moment: the newest
// checkpoint must always be one a rollback or a resume can go on from.
//
// Collectives: save() and newest_good(); every rank makes the same calls with the same agreed
// values. Thread safety: the step loop's thread only (the writer's own thread is the
// Checkpointer's). Borrows the communicator and the components; they must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_policy.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

class CheckpointManager {
 public:
  // Opens this rank's writer (rank 0's first clears what an interrupted write left).
  // `components`: everything whose state a checkpoint holds, saved and restored in this order.
  CheckpointManager(const Experiment& exp, Communicator& comm, std::vector<Stateful*> components);
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // `step` optimizer steps are done; `stop` is the stop request every rank agreed on.
  bool due(int64_t step, bool stop) const { return policy_.save_after(step, stop); }

  // Collective: saves the components' state as the checkpoint of `step` (with the resolved
  // config) unless it is not fit to be one: `bad_in_row` agreed bad steps, or a non-finite
  // weight or moment. Returns why it was not written, "" when it was; empty on every rank or on
  // none. `before_snapshot` runs first when it will be saved (the metrics flush, so metrics.h5
  // holds every row up to the checkpoint). A rank that could not write its file makes every
  // rank throw CheckpointWriteError, so the job ends at once.
  std::string save(int64_t step, int bad_in_row, const std::function<void()>& before_snapshot);
  // Not collective: opens `file` (any format) and has every component read what it needs from
  // it (each checks it matches: names, shapes, its values). Returns the checkpoint's summary,
  // for messages.
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
  RankSnapshot snapshot();

  const Experiment& exp_;
  Communicator& comm_;
  std::vector<Stateful*> components_;
  CheckpointPolicy policy_;
  std::string config_yaml_;
  std::unique_ptr<Checkpointer> writer_;
  std::string newest_;
};

}  // namespace trainrun
