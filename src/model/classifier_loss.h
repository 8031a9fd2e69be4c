// ClassifierLoss: the models' last step, private to src/model: cross-entropy over the logits,
// each row's loss summed into the caller's device scalar, and the loss's gradient written over
// the logits (dlogits aliases logits: no second [N,V] buffer). In training (grad_scale > 0) the
// gradient comes from the same pass as the loss (Backend::cross_entropy_fused) and backward()
// only checks the scale; otherwise backward() computes it from the saved lse.
// Thread safety: none (a model's).
#pragma once

#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"

namespace trainrun {

class ClassifierLoss {
 public:
  // Takes losses [N] and lse [N] of the stats dtype from the arena.
  void bind(Arena& acts, int64_t N, DType stats);
  void forward(Backend& be, Tensor logits, Tensor targets, Tensor loss_sum, float grad_scale);
  // dlogits over logits at `scale`; throws std::logic_error when the forward fused another scale.
  void backward(Backend& be, Tensor logits, Tensor targets, float scale);

 private:
  Tensor losses_, lse_;
  float fused_scale_ = 0;  // the scale of the gradient the last forward wrote; 0: none
};

}  // namespace trainrun
