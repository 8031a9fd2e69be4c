// Evaluator: the validation loss, every train.eval_every steps and after the last one: the mean
// forward loss over train.eval_steps validation batches (the same samples every time, so the
// values are comparable across steps), averaged over the ranks.
//
// A stop request arriving between two batches abandons it, so a long evaluation never delays a
// stop (the weights are still the step's, so the stop's checkpoint is as good as after it). With
// several ranks that outcome is agreed in the same allreduce as the loss, so every rank stops or
// goes on together. Collective: run(). Borrows everything it is given, which must outlive it.
#pragma once

#include <cstdint>
#include <optional>

#include "batches.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"
#include "trainrun/model/model.h"
#include "watchdog.h"

namespace trainrun {

class Evaluator {
 public:
  // `accum` micro-batches of `batches` make one validation batch on each rank; `watchdog` (may be
  // null) is told the phases.
  Evaluator(const TrainConfig& train, int accum, Batches& batches, Model& model, Communicator& comm,
            Watchdog* watchdog);
  // Whether an evaluation follows step `step` (1-based, as the metrics rows count them).
  bool due(int64_t step) const;
  // Collective: the mean validation loss (NaN with eval_steps 0), or nullopt when a stop request
  // abandoned it. `step` only names it in the watchdog and the log.
  std::optional<double> run(int64_t step);

 private:
  void phase(Phase p, int64_t step);

  int64_t every_, last_step_;
  int batches_per_eval_, accum_;
  Batches& batches_;
  Model& model_;
  Communicator& comm_;
  Watchdog* watchdog_;
};

}  // namespace trainrun
