// The memory check every run passes before anything starts: the plan's bytes per rank against
// what this machine or the GPU has. Nothing is measured, so it costs nothing.
#include <fmt/format.h>

#include <algorithm>

#include "trainrun/core/errors.h"
#include "trainrun/plan/plan.h"
#include "trainrun/preflight/preflight.h"

namespace trainrun {

void check_memory(const Experiment& exp) {
  constexpr double kGiB = 1073741824.0;
  const bool gpu = exp.device == DeviceChoice::cuda;
  std::string where = "this machine";
  double available = 0;
  if (gpu) {
    const DevicePeak peak = device_peak(exp);  // the GPU table: nothing is measured
    where = peak.name;
    available = peak.memory;
  } else {
    available = mem_available_bytes() / std::max(1, exp.distributed.nproc);
  }
  if (available <= 0) return;  // unknown: nothing to compare against
  const MemoryPlan m = plan_memory(exp, gpu);
  if (m.total <= available) return;
  throw ConfigError(fmt::format(
      "this run needs {:.2f} GiB per rank (parameters {:.2f}, gradients {:.2f}, optimizer "
      "{:.2f}, units in use {:.2f}, activations {:.2f}, workspace {:.2f}) but {} has {:.2f} GiB "
      "per rank; shrink train.micro_batch_size or the model, shard the state with "
      "distributed.zero=3 (1 for an mlp), or see `trainrun plan`",
      m.total / kGiB, m.params / kGiB, m.grads / kGiB, m.optimizer / kGiB, m.gathered / kGiB,
      m.activations / kGiB, m.workspace / kGiB, where, available / kGiB));
}

}  // namespace trainrun
