// LayerNorm over the last dimension with learned scale and shift; saves mean and 1/std per row.
#pragma once

#include <string>

#include "trainrun/model/params.h"

namespace trainrun {

class LayerNorm {
 public:
  LayerNorm(ParamStore& ps, const std::string& name, int dim);
  void bind(Arena& acts, int64_t rows);
  void forward(Tensor out, Tensor in) const;
  // sum = x + y (a residual add), then out = forward(sum), in one op (Backend::residual_layernorm).
  void forward_residual(Tensor sum, Tensor out, Tensor x, Tensor y) const;
  void backward(Tensor din, Tensor dout, Tensor in) const;

 private:
  ParamStore& ps_;
  int w_, b_;
  Tensor mean_, rstd_;
};

}  // namespace trainrun
