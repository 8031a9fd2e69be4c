// Trainer: runs one experiment on this rank: wires communicator, backend, model, data loader and
// the step loop's components (src/train/: batches, data-parallel strategy, recovery, evaluator,
// checkpoint manager, step reporter) together and drives the step loop.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

struct RunOptions {
  std::string resume_file;  // a checkpoint to resume from ("" = fresh run)
  std::string profile;      // "A:B": write Chrome traces for steps [A, B)
};

// Runs the experiment as one rank (or alone); returns the process exit code (errors.h).
int run_training(const Experiment& exp, const RunOptions& opts);

}  // namespace trainrun
