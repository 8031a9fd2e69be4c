// Model's one non-virtual member: the forward pass whose loss the host waits for.
#include "trainrun/model/model.h"

namespace trainrun {

double Model::forward(bool training, uint64_t dropout_seed) {
  Backend& be = params().backend();
  if (!loss_sum_.data()) loss_sum_ = DeviceBuffer(be, sizeof(double));
  const Tensor on_device(loss_sum_.data(), DType::f64, be.device(), {1});
  forward(training, dropout_seed, on_device, 0.0f);
  double sum = 0;
  be.copy(Tensor(&sum, DType::f64, Device::cpu, {1}), on_device);
  return sum / static_cast<double>(targets_per_batch());
}

}  // namespace trainrun
