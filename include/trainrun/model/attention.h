// CausalSelfAttention: qkv projection, multi-head causal attention, output projection.
// Keeps qkv, the pre-projection output and the per-row log-sum-exp for backward; never a
// T x T matrix.
#pragma once

#include <string>

#include "trainrun/model/linear.h"

namespace trainrun {

class CausalSelfAttention {
 public:
  CausalSelfAttention(ParamStore& ps, const std::string& name, int d_model, int n_head,
                      float proj_std);
  void bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq);
  void forward(Tensor out, Tensor in) const;
  void backward(Tensor din, Tensor dout, Tensor in) const;  // uses (zeroed) scratch

 private:
  ParamStore& ps_;
  int d_model_, n_head_;
  Linear qkv_, proj_;
  Tensor qkv_out_, y_, lse_;  // activations
  Tensor dqkv_, dy_;          // gradient scratch
};

}  // namespace trainrun
