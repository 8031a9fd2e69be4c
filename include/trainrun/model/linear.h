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
  int in_features() const { return in_; }
  int out_features() const { return out_; }

 private:
  ParamStore& ps_;
  int in_, out_;
  int w_ = -1, b_ = -1;
};

}  // namespace trainrun
