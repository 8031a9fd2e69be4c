// Linear: out = in . W^T + b, W stored [out, in] (GPT-2's layout, so a tied head reuses wte).
#pragma once

#include <string>

#include "trainrun/model/params.h"

namespace trainrun {

class Linear {
 public:
  Linear(ParamStore& ps, const std::string& name, int in, int out, bool bias, float init_std,
         bool decay = true);
  void forward(Tensor out, Tensor in) const;
  // din += (or =, with GradWrite::overwrite) d(loss)/d(in); the weight gradients accumulate.
  // din may be empty (first layer of a model fed by an embedding that is handled elsewhere).
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;
  // This Linear with a GELU after it: pre = forward(in), out = gelu(pre) (Backend::matmul_gelu).
  void forward_gelu(Tensor out, Tensor pre, Tensor in) const;
  // The backward of a Linear whose input is gelu(pre): dpre = d(loss)/d(pre), overwritten
  // (Backend::matmul_backward_gelu); the weight gradients as backward().
  void backward_gelu(Tensor dpre, Tensor dout, Tensor in, Tensor pre) const;
  int in_features() const { return in_; }
  int out_features() const { return out_; }

 private:
  GradWrite param_write() const;  // how this step writes the weight (and bias) gradients

  ParamStore& ps_;
  int in_, out_;
  int w_ = -1, b_ = -1;
};

}  // namespace trainrun
