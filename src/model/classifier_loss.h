// ClassifierLoss: the models' last step, private to src/model: cross-entropy over the logits,
// each row's loss summed into the caller's device scalar, and the loss's gradient written over
// the logits (dlogits aliases logits: no second [N,V] buffer). In training (grad_scale > 0) the
// gradient comes from the same pass as the loss (Backend::cross_entropy_fused) and backward()
// only checks the scale; otherwise backward() computes it from the saved lse.
// Vocabulary-parallel (tensor parallelism, bind's tp): each rank holds the logits of its part of
// the vocabulary and its part's targets (kNoId for another rank's). The loss is never fused
// then: forward computes each rank's lse and target logit, combines them over the ranks into
// the whole vocabulary's (one all-reduce, no logits gathered), and backward takes the gradient
// from that global lse.
// Thread safety: none (a model's).
#pragma once

#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"

namespace trainrun {

class ClassifierLoss {
 public:
  // Takes losses [N] and lse [N] of the stats dtype from the arena (and a [tp + 1, N] buffer
  // when vocabulary-parallel).
  void bind(Arena& acts, int64_t N, DType stats, TensorParallel tp = {});
  void forward(Backend& be, Tensor logits, Tensor targets, Tensor loss_sum, float grad_scale);
  // dlogits over logits at `scale`; throws std::logic_error when the forward fused another scale.
  void backward(Backend& be, Tensor logits, Tensor targets, float scale);

 private:
  template <class S>
  void combine(Backend& be);  // the vocabulary-parallel lse and losses, from every rank's part

  Tensor losses_, lse_;
  float fused_scale_ = 0;  // the scale of the gradient the last forward wrote; 0: none
  TensorParallel tp_;
  Tensor parts_;  // vocabulary-parallel: [tp + 1, N], every rank's lse and the target logits
};

}  // namespace trainrun
