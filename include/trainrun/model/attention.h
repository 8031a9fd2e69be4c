// CausalSelfAttention: qkv projection, multi-head causal attention, output projection.
// Keeps qkv, the pre-projection output and the per-row log-sum-exp for backward; never a
// T x T matrix. The defaults are GPT-2's; AttentionOptions adds what Llama changes: fewer
// key/value heads (grouped-query), rotary position embedding on q and k, no biases.
#pragma once

#include <string>

#include "trainrun/model/linear.h"

namespace trainrun {

struct AttentionOptions {
  int n_kv_head = 0;  // key/value heads; 0 = n_head. Divides n_head (1 = multi-query).
  bool bias = true;   // biases on the qkv and output projections
  bool rope = false;  // rotate q and k by position (head dim even)
  float rope_theta = 10000.0f;
};

class CausalSelfAttention {
 public:
  // Parameters "<name>.qkv" [(n_head + 2 n_kv_head) * head_dim, d_model] (q | k | v) and
  // "<name>.proj" [d_model, d_model], each with a bias when opt.bias. Under tensor parallelism
  // (ParamStore::tp()) this rank holds n_head / tp query heads and n_kv_head / tp kv heads:
  // qkv column-parallel, proj row-parallel (linear.h).
  CausalSelfAttention(ParamStore& ps, const std::string& name, int d_model, int n_head,
                      float proj_std, AttentionOptions opt = {});
  // doc_start: the model's document starts for the batch, read at every call (an empty tensor
  // when there are none); it outlives the module.
  void bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq, const Tensor* doc_start);
  void forward(Tensor out, Tensor in) const;
  // din += (or =) d(loss)/d(in), as Linear::backward. Zeroes the scratch it accumulates into.
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;

 private:
  ParamStore& ps_;
  int n_head_;  // n_head_, opt_.n_kv_head and the widths: this rank's heads
  AttentionOptions opt_;
  int qkv_width_;
  int width_ = 0;  // the heads' output width: d_model / tp
  Linear qkv_, proj_;
  const Tensor* doc_start_ = nullptr;
  Tensor qkv_out_, y_, lse_;  // activations (qkv_out_ after the rotation, when rope)
  Tensor dqkv_, dy_;          // gradient scratch
};

}  // namespace trainrun
