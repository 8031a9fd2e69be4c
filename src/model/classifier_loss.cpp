#include "classifier_loss.h"

#include <fmt/format.h>

#include <stdexcept>

namespace trainrun {

void ClassifierLoss::bind(Arena& acts, int64_t N, DType stats) {
  losses_ = acts.take(stats, {N});
  lse_ = acts.take(stats, {N});
}

void ClassifierLoss::forward(Backend& be, Tensor logits, Tensor targets, Tensor loss_sum,
                             float grad_scale) {
  if (grad_scale > 0)
    be.cross_entropy_fused(losses_, lse_, logits, logits, targets, grad_scale);
  else
    be.cross_entropy(losses_, lse_, logits, targets);
  fused_scale_ = grad_scale > 0 ? grad_scale : 0.0f;
  be.sum_to(loss_sum, losses_);
}

void ClassifierLoss::backward(Backend& be, Tensor logits, Tensor targets, float scale) {
  const float fused = fused_scale_;
  fused_scale_ = 0;  // the gradient is consumed by this backward
  if (fused == 0) {
    be.cross_entropy_backward(logits, logits, lse_, targets, scale);
    return;
  }
  if (fused != scale)
    throw std::logic_error(fmt::format(
        "backward at gradient scale {} after a forward that fused the loss's gradient at {}", scale,
        fused));
}

}  // namespace trainrun
