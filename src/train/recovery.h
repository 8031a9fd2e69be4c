// Recovery: what a run does about its health. It owns the HealthMonitor (the pure judge) and
// acts on its verdicts: a warning and a metrics event for a loss spike or a bad step (its update
// skipped), and when bad steps go on, the way back, to the newest good checkpoint with a lower
// learning rate (fault_tolerance.rollback_lr_factor), or giving up when there is none or the
// rollbacks are used up (docs/fault-tolerance.md).
//
// Its checkpointed state (state_dict.h) is the run's count of bad steps and the learning-rate
// scale its rollbacks lowered (health/bad_steps_total, health/lr_scale).
//
// Every rank feeds it the same agreed values and so takes the same way out. Thread safety: the
// step loop's thread only. Borrows the reporter, which must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "health_monitor.h"
#include "step_reporter.h"
#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

class Recovery final : public Stateful {
 public:
  Recovery(const FaultToleranceConfig& cfg, StepReporter& reporter);

  // Judges step `step` (numbered as its metrics row) by its agreed loss and gradient norm.
  HealthMonitor::Action judge(int64_t step, double loss, double grad_norm);
  // Bad steps in a row: while non-zero no checkpoint is written.
  int bad_in_row() const { return health_.bad_in_row(); }
  // What the learning rate is multiplied by: 1 until a rollback lowers it.
  double lr_scale() const { return lr_scale_; }
  int64_t bad_steps_total() const { return bad_steps_total_; }

  // Where a roll_back verdict goes: `newest_good` (the newest checkpoint that verifies), the
  // learning-rate scale after it, and the bad steps counted so far (they happened, whatever the
  // checkpoint says); nullopt, logged why, when the run must give up instead.
  struct Rollback {
    std::string file;
    double lr_scale;
    int64_t bad_steps_total;
  };
  std::optional<Rollback> plan_rollback(const std::optional<std::string>& newest_good) const;
  // The caller restored rb.file (which put back this component's state as it was then) and is
  // now at step `to` (from step `from`): takes rb's scale and count, and is counted, logged and
  // recorded as an event (after the metrics were cut back to `to`).
  void rolled_back(int64_t from, int64_t to, const Rollback& rb);

  void state_dict(StateDict& out) override;
  void load_state_dict(StateSource& in) override;

 private:
  FaultToleranceConfig cfg_;
  HealthMonitor health_;
  StepReporter& reporter_;
  int64_t bad_steps_total_ = 0;
  double lr_scale_ = 1.0;
};

}  // namespace trainrun
