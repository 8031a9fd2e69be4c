#include "fault_injection.h"

#include <spdlog/spdlog.h>

namespace trainrun {

void FaultInjector::load(int rank, int restart_count) {
  faults_ = Faults::from_env(rank, restart_count);
  if (faults_.any())
    spdlog::warn("TEST FAULT INJECTION ACTIVE on rank {} (TRAINRUN_FAULTS): {}", rank,
                 faults_.describe());
}

std::unique_ptr<Backend> FaultInjector::wrap(std::unique_ptr<Backend> be) {
  if (!active()) return be;
  auto faulty = std::make_unique<FaultyBackend>(std::move(be), faults_);
  backend_ = faulty.get();
  return faulty;
}

void FaultInjector::watch(const StateBuffers& state) {
  if (backend_) backend_->watch(state);
}

void FaultInjector::on_step(int64_t nth) {
  if (!active()) return;
  faults_.at_step_start(nth);
  if (backend_) backend_->begin_step(nth);
}

}  // namespace trainrun
