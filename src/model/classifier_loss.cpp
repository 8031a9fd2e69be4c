#include "classifier_loss.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace trainrun {

void ClassifierLoss::bind(Arena& acts, int64_t N, DType stats, TensorParallel tp) {
  losses_ = acts.take(stats, {N});
  lse_ = acts.take(stats, {N});
  tp_ = tp;
  if (tp_.size > 1) parts_ = acts.take(stats, {tp_.size + 1, N});
}

// Rank r puts its lse in row r of a zeroed [tp + 1, N] buffer and its share of each target's
// logit (lse - loss: the logit where it holds the target, else 0) in the last row; one all-reduce
// sums it, and every rank combines the rows into the row's logsumexp over the whole vocabulary
// (max-shifted) and its loss, identically. N values a micro-batch, on the host.
template <class S>
void ClassifierLoss::combine(Backend& be) {
  const int64_t N = lse_.numel(), tp = tp_.size;
  std::vector<S> lse(static_cast<size_t>(N)), loss(lse.size());
  std::vector<S> parts(static_cast<size_t>((tp + 1) * N), S(0));
  const DType dt = lse_.dtype;
  be.copy(Tensor(lse.data(), dt, Device::cpu, {N}), lse_);
  be.copy(Tensor(loss.data(), dt, Device::cpu, {N}), losses_);
  for (int64_t n = 0; n < N; ++n) {
    const auto i = static_cast<size_t>(n);
    parts[static_cast<size_t>(tp_.rank * N + n)] = lse[i];
    parts[static_cast<size_t>(tp * N + n)] = lse[i] - loss[i];
  }
  const Tensor host(parts.data(), dt, Device::cpu, {tp + 1, N});
  be.copy(parts_, host);
  tp_.comm->allreduce_sum(parts_);
  be.copy(host, parts_);
  for (int64_t n = 0; n < N; ++n) {
    S m = parts[static_cast<size_t>(n)];
    for (int64_t r = 1; r < tp; ++r) m = std::max(m, parts[static_cast<size_t>(r * N + n)]);
    S sum = 0;
    for (int64_t r = 0; r < tp; ++r) sum += std::exp(parts[static_cast<size_t>(r * N + n)] - m);
    const auto i = static_cast<size_t>(n);
    lse[i] = m + std::log(sum);
    loss[i] = lse[i] - parts[static_cast<size_t>(tp * N + n)];
  }
  be.copy(lse_, Tensor(lse.data(), dt, Device::cpu, {N}));
  be.copy(losses_, Tensor(loss.data(), dt, Device::cpu, {N}));
}

void ClassifierLoss::forward(Backend& be, Tensor logits, Tensor targets, Tensor loss_sum,
                             float grad_scale) {
  if (tp_.size > 1) {
    be.cross_entropy(losses_, lse_, logits, targets);
    if (lse_.dtype == DType::f64)
      combine<double>(be);
    else
      combine<float>(be);
    fused_scale_ = 0;  // the gradient needs the global lse: backward computes it
    be.sum_to(loss_sum, losses_);
    return;
  }
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
