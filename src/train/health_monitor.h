// HealthMonitor: judges each step from its global loss and gradient norm, kept apart from the
// step loop as llm.c keeps its outlier detector. A step with a non-finite loss or norm is bad
// and its update is skipped; max_bad_steps bad steps in a row call for a rollback to the newest
// good checkpoint, at most max_rollbacks times, and then for giving up. A finite loss more than
// spike_zscore standard deviations above the last (up to 50) good steps' mean is a spike: a
// warning only, judged once 10 steps are known.
//
// Pure: no I/O and no collectives. Every rank feeds it the same allreduced values and so reaches
// the same decisions. Not thread-safe (the step loop's thread only).
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

#include "trainrun/core/experiment.h"

namespace trainrun {

class HealthMonitor {
 public:
  enum class Action {
    proceed,    // a good step
    skip,       // a bad step: its update was not applied; go on
    roll_back,  // too many bad steps in a row: restore the newest good checkpoint
    give_up,    // ... and the rollbacks are used up
  };
  struct Spike {
    double zscore, mean;
    size_t window;  // how many recent losses the mean and deviation are over
  };
  struct Verdict {
    Action action = Action::proceed;
    int bad_in_row = 0;          // bad steps in a row, this one included
    std::optional<Spike> spike;  // a good step whose loss spiked
  };

  explicit HealthMonitor(const FaultToleranceConfig& cfg) : cfg_(cfg) {}

  // Whether a step's update may be applied at all.
  static bool finite(double loss, double grad_norm);
  Verdict observe(double loss, double grad_norm);
  // Bad steps in a row so far (0 after a good step or a rollback verdict). While it is
  // non-zero the run may be diverging, so no checkpoint is written (docs/fault-tolerance.md).
  int bad_in_row() const { return bad_in_row_; }
  // The caller restored a checkpoint after a roll_back verdict.
  void rolled_back() { ++rollbacks_; }
  int rollbacks() const { return rollbacks_; }

 private:
  std::optional<Spike> check_spike(double loss) const;

  FaultToleranceConfig cfg_;
  int bad_in_row_ = 0;
  int rollbacks_ = 0;
  std::deque<double> recent_losses_;  // the last good steps' losses, oldest first
};

}  // namespace trainrun
