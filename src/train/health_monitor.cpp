#include "health_monitor.h"

#include <cmath>

namespace trainrun {

namespace {
constexpr size_t kMinWindow = 10;  // losses known before a spike can be judged
constexpr size_t kMaxWindow = 50;
}  // namespace

bool HealthMonitor::finite(double loss, double grad_norm) {
  return std::isfinite(loss) && std::isfinite(grad_norm);
}

HealthMonitor::Verdict HealthMonitor::observe(double loss, double grad_norm) {
  Verdict v;
  if (finite(loss, grad_norm)) {
    bad_in_row_ = 0;
    v.spike = check_spike(loss);
    recent_losses_.push_back(loss);
    if (recent_losses_.size() > kMaxWindow) recent_losses_.pop_front();
    return v;
  }
  v.bad_in_row = ++bad_in_row_;
  v.action = Action::skip;
  if (bad_in_row_ >= cfg_.max_bad_steps) {
    bad_in_row_ = 0;  // a rollback starts a fresh count
    v.action = rollbacks_ >= cfg_.max_rollbacks ? Action::give_up : Action::roll_back;
  }
  return v;
}

std::optional<HealthMonitor::Spike> HealthMonitor::check_spike(double loss) const {
  const double z_limit = cfg_.spike_zscore;
  const size_t n = recent_losses_.size();
  if (z_limit <= 0 || n < kMinWindow) return std::nullopt;
  double mean = 0, var = 0;
  for (double l : recent_losses_) mean += l;
  mean /= n;
  for (double l : recent_losses_) var += (l - mean) * (l - mean);
  const double sd = std::sqrt(var / n);
  const double z = sd > 0 ? (loss - mean) / sd : 0;
  if (z > z_limit) return Spike{z, mean, n};
  return std::nullopt;
}

}  // namespace trainrun
