#include "trainrun/model/activation.h"

#include <stdexcept>

namespace trainrun {

Activation::Kind Activation::parse(const std::string& name) {
  if (name == "gelu") return gelu;
  if (name == "relu") return relu;
  throw std::invalid_argument("unknown activation '" + name + "' (gelu | relu)");
}

void Activation::forward(Tensor out, Tensor in) const {
  if (kind_ == gelu)
    be_.gelu(out, in);
  else
    be_.relu(out, in);
}

void Activation::backward(Tensor din, Tensor dout, Tensor in) const {
  if (kind_ == gelu)
    be_.gelu_backward(din, dout, in);
  else
    be_.relu_backward(din, dout, in);
}

}  // namespace trainrun
