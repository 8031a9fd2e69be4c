// RMSNorm over the last dimension with a learned scale and no shift (Llama): out = in * rstd * w,
// rstd = 1 / sqrt(mean(in^2) + 1e-5). Saves rstd per row for backward. The weight starts at
// ones and is not decayed.
#pragma once

#include <string>

#include "trainrun/model/params.h"

namespace trainrun {

class RMSNorm {
 public:
  RMSNorm(ParamStore& ps, const std::string& name, int dim);
  void bind(Arena& acts, int64_t rows);
  void forward(Tensor out, Tensor in) const;
  // sum = x + y (a residual add), then out = forward(sum), in one op (Backend::residual_rmsnorm).
  void forward_residual(Tensor sum, Tensor out, Tensor x, Tensor y) const;
  // din += d(loss)/d(in); the weight's gradient accumulates into the store.
  void backward(Tensor din, Tensor dout, Tensor in) const;

 private:
  ParamStore& ps_;
  int w_;
  Tensor rstd_;
};

}  // namespace trainrun
