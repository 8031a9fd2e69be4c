#include "trainrun/model/rmsnorm.h"

namespace trainrun {

RMSNorm::RMSNorm(ParamStore& ps, const std::string& name, int dim) : ps_(ps) {
  w_ = ps.declare(name + ".weight", {dim}, Init::ones, 0.0f, false);
}

void RMSNorm::bind(Arena& acts, int64_t rows) {
  rstd_ = acts.take(ps_.stats_dtype(), {rows});
}

void RMSNorm::forward(Tensor out, Tensor in) const {
  ps_.backend().rmsnorm(out, rstd_, in, ps_.param(w_));
}

void RMSNorm::forward_residual(Tensor sum, Tensor out, Tensor x, Tensor y) const {
  ps_.backend().residual_rmsnorm(sum, out, rstd_, x, y, ps_.param(w_));
}

void RMSNorm::backward(Tensor din, Tensor dout, Tensor in) const {
  ps_.backend().rmsnorm_backward(din, ps_.grad(w_), dout, in, ps_.param(w_), rstd_,
                                 ps_.grad_write(w_));
}

}  // namespace trainrun
