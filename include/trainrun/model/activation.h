// Pointwise activations (GELU, tanh approximation as in GPT-2; ReLU).
#pragma once

#include <string>

#include "trainrun/backend.h"

namespace trainrun {

class Activation {
 public:
  enum Kind { gelu, relu };
  Activation(Backend& be, Kind kind) : be_(be), kind_(kind) {}
  static Kind parse(const std::string& name);  // "gelu" | "relu"
  void forward(Tensor out, Tensor in) const;
  void backward(Tensor din, Tensor dout, Tensor in) const;

 private:
  Backend& be_;
  Kind kind_;
};

}  // namespace trainrun
