// Pre-LN transformer block: x1 = x + drop(attn(ln1(x))); out = x1 + drop(mlp(ln2(x1))).
#pragma once

#include <cstdint>
#include <string>

#include "trainrun/model/attention.h"
#include "trainrun/model/layernorm.h"
#include "trainrun/model/mlp.h"

namespace trainrun {

class TransformerBlock {
 public:
  TransformerBlock(ParamStore& ps, const std::string& name, int d_model, int n_head, int n_layer);
  // Activations are per block; gradient scratch is shared by all blocks (one backward at a time).
  void bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq);
  void forward(Tensor out, Tensor x, float dropout, uint64_t seed) const;
  // dx += d(loss)/dx. Zeroes and reuses the shared scratch.
  void backward(Tensor dx, Tensor dout, Tensor x, float dropout, uint64_t seed) const;
  int64_t param_begin() const { return begin_; }
  int64_t param_end() const { return end_; }

 private:
  ParamStore& ps_;
  int64_t begin_, end_;  // this block's range of the flat buffers
  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  MLP mlp_;
  int dim_;
  Tensor l1_, ao_, x1_, l2_, mo_;       // activations
  Tensor dmo_, dl2_, dx1_, dao_, dl1_;  // gradient scratch
  Arena* scratch_ = nullptr;
  size_t scratch_begin_ = 0, scratch_end_ = 0;
};

}  // namespace trainrun
