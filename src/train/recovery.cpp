#include "recovery.h"

#include <spdlog/spdlog.h>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/errors.h"

namespace trainrun {

Recovery::Recovery(const FaultToleranceConfig& cfg, StepReporter& reporter)
    : cfg_(cfg), health_(cfg), reporter_(reporter) {}

HealthMonitor::Action Recovery::judge(int64_t step, double loss, double grad_norm) {
  const HealthMonitor::Verdict v = health_.observe(loss, grad_norm);
  if (v.spike) {
    spdlog::warn(
        "step {}: loss spike {:.4f} is {:.1f} std devs above the last {} steps' "
        "mean {:.4f} (warning only)",
        step, loss, v.spike->zscore, v.spike->window, v.spike->mean);
    reporter_.event(step, MetricEvent::loss_spike, {{"loss", loss}, {"zscore", v.spike->zscore}});
  }
  if (v.action == HealthMonitor::Action::proceed) return v.action;
  ++bad_steps_total_;
  spdlog::warn("step {}: non-finite loss {} or grad norm {}: update skipped ({} in a row)", step,
               loss, grad_norm, v.bad_in_row);
  reporter_.event(step, MetricEvent::bad_step, {{"loss", loss}, {"grad_norm", grad_norm}});
  if (v.action == HealthMonitor::Action::give_up) {
    spdlog::error("{} non-finite steps in a row after {} rollback(s): giving up (exit {})",
                  cfg_.max_bad_steps, health_.rollbacks(), int(kExitGaveUp));
    reporter_.event(step, MetricEvent::gave_up, {{"rollbacks", double(health_.rollbacks())}});
  }
  return v.action;
}

std::optional<Recovery::Rollback> Recovery::plan_rollback(
    const std::optional<std::string>& newest_good) const {
  if (!newest_good) {
    spdlog::error("{} non-finite steps in a row and no checkpoint to roll back to: giving up",
                  cfg_.max_bad_steps);
    return std::nullopt;
  }
  const double scale = lr_scale_ * cfg_.rollback_lr_factor;
  if (!(scale > 0)) {  // a learning rate of 0 learns nothing, and no checkpoint may hold it
    spdlog::error(
        "rolling back would scale the learning rate by {} (fault_tolerance.rollback_lr_factor "
        "{}): giving up",
        scale, cfg_.rollback_lr_factor);
    return std::nullopt;
  }
  return Rollback{*newest_good, scale, bad_steps_total_};
}

void Recovery::rolled_back(int64_t from, int64_t to, const Rollback& rb) {
  lr_scale_ = rb.lr_scale;
  bad_steps_total_ = rb.bad_steps_total;
  health_.rolled_back();
  spdlog::warn("rolled back from step {} to step {} ({}); learning rate now x{:.3g}", from, to,
               rb.file, rb.lr_scale);
  reporter_.event(to, MetricEvent::rollback,
                  {{"from_step", double(from)}, {"lr_scale", rb.lr_scale}});
}

void Recovery::state_dict(StateDict& out) {
  out.put(state_name::bad_steps_total, bad_steps_total_);
  out.put(state_name::lr_scale, lr_scale_);
}

// The checkpoint judged the values sane (absurd_value: a count not negative, a scale in (0, 1]).
void Recovery::load_state_dict(StateSource& in) {
  bad_steps_total_ = read_int(in, state_name::bad_steps_total);
  lr_scale_ = read_double(in, state_name::lr_scale);
}

}  // namespace trainrun
