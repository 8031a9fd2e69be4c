#include "trainrun/model/activation.h"

namespace trainrun {

void Activation::forward(Tensor out, Tensor in) const {
  if (kind_ == gelu)
    be_.gelu(out, in);
  else
    be_.relu(out, in);
}

void Activation::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  if (kind_ == gelu)
    be_.gelu_backward(din, dout, in, write);
  else
    be_.relu_backward(din, dout, in, write);
}

}  // namespace trainrun
