// Pointwise activations (GELU, tanh approximation as in GPT-2; ReLU).
#pragma once

#include "trainrun/backend/backend.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

class Activation {
 public:
  // The config's model.activation; Activation::gelu and Activation::relu name its values.
  using Kind = ActivationKind;
  using enum ActivationKind;
  Activation(Backend& be, Kind kind) : be_(be), kind_(kind) {}
  void forward(Tensor out, Tensor in) const;
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;

 private:
  Backend& be_;
  Kind kind_;
};

}  // namespace trainrun
