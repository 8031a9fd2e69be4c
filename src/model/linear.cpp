#include "trainrun/model/linear.h"

#include <stdexcept>

namespace trainrun {

Linear::Linear(ParamStore& ps, const std::string& name, int in, int out, bool bias, float init_std,
               bool decay)
    : ps_(ps), in_(in), out_(out) {
  w_ = ps.declare(name + ".weight", {out, in}, Init::normal, init_std, decay);
  if (bias) b_ = ps.declare(name + ".bias", {out}, Init::zeros, 0.0f, false);
}

void Linear::forward(Tensor out, Tensor in) const {
  ps_.backend().matmul(out, in, ps_.param(w_), b_ >= 0 ? ps_.param(b_) : Tensor{});
}

void Linear::forward_gelu(Tensor out, Tensor pre, Tensor in) const {
  ps_.backend().matmul_gelu(out, pre, in, ps_.param(w_), b_ >= 0 ? ps_.param(b_) : Tensor{});
}

GradWrite Linear::param_write() const {
  const GradWrite pw = ps_.grad_write(w_);  // the bias is written with the weight, always
  if (b_ >= 0 && ps_.grad_write(b_) != pw)
    throw std::logic_error("Linear::backward: weight and bias gradients out of step");
  return pw;
}

void Linear::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  ps_.backend().matmul_backward(din, ps_.grad(w_), b_ >= 0 ? ps_.grad(b_) : Tensor{}, dout, in,
                                ps_.param(w_), write, param_write());
}

void Linear::backward_gelu(Tensor dpre, Tensor dout, Tensor in, Tensor pre) const {
  ps_.backend().matmul_backward_gelu(dpre, ps_.grad(w_), b_ >= 0 ? ps_.grad(b_) : Tensor{}, dout,
                                     in, ps_.param(w_), pre, param_write());
}

}  // namespace trainrun
