// MLP block of a transformer: Linear(C, 4C) -> GELU -> Linear(4C, C).
#pragma once

#include <string>

#include "trainrun/model/linear.h"

namespace trainrun {

class MLP {
 public:
  MLP(ParamStore& ps, const std::string& name, int d_model, float proj_std);
  // fc's output is kept, the GELU's is pointwise (ActivationArenas).
  void bind(ActivationArenas acts, Arena& scratch, int64_t rows);
  void bind(Arena& acts, Arena& scratch, int64_t rows) { bind({acts, acts}, scratch, rows); }
  void forward(Tensor out, Tensor in) const;
  // The GELU's output again from fc's (selective checkpointing), as forward() computed it.
  void recompute_pointwise() const;
  // din += (or =) d(loss)/d(in), as Linear::backward.
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;

 private:
  ParamStore& ps_;
  Linear fc_, proj_;   // column- and row-parallel under tensor parallelism (linear.h)
  int hidden_;         // this rank's hidden width: 4 d_model / tp
  Tensor h_, a_;       // activations: fc's output (the GELU's input) and the GELU's
  Tensor dh_;          // gradient scratch
  bool fused_ = true;  // fc and the GELU as one op; not when the GELU is recomputed alone
};

}  // namespace trainrun
