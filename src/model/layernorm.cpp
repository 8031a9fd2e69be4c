#include "trainrun/model/layernorm.h"

#include <stdexcept>

namespace trainrun {

LayerNorm::LayerNorm(ParamStore& ps, const std::string& name, int dim) : ps_(ps) {
  w_ = ps.declare(name + ".weight", {dim}, Init::ones, 0.0f, false);
  b_ = ps.declare(name + ".bias", {dim}, Init::zeros, 0.0f, false);
}

void LayerNorm::bind(Arena& acts, int64_t rows) {
  mean_ = acts.take(ps_.stats_dtype(), {rows});
  rstd_ = acts.take(ps_.stats_dtype(), {rows});
}

void LayerNorm::forward(Tensor out, Tensor in) const {
  ps_.backend().layernorm(out, mean_, rstd_, in, ps_.param(w_), ps_.param(b_));
}

void LayerNorm::forward_residual(Tensor sum, Tensor out, Tensor x, Tensor y) const {
  ps_.backend().residual_layernorm(sum, out, mean_, rstd_, x, y, ps_.param(w_), ps_.param(b_));
}

void LayerNorm::backward(Tensor din, Tensor dout, Tensor in) const {
  const GradWrite pw = ps_.grad_write(w_);  // the bias is written with the weight, always
  if (ps_.grad_write(b_) != pw)
    throw std::logic_error("LayerNorm::backward: weight and bias gradients out of step");
  ps_.backend().layernorm_backward(din, ps_.grad(w_), ps_.grad(b_), dout, in, ps_.param(w_), mean_,
                                   rstd_, pw);
}

}  // namespace trainrun
