#include "trainrun/model/attention.h"

namespace trainrun {

CausalSelfAttention::CausalSelfAttention(ParamStore& ps, const std::string& name, int d_model,
                                         int n_head, float proj_std)
    : ps_(ps),
      d_model_(d_model),
      n_head_(n_head),
      qkv_(ps, name + ".qkv", d_model, 3 * d_model, true, 0.02f),
      proj_(ps, name + ".proj", d_model, d_model, true, proj_std) {}

void CausalSelfAttention::bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq) {
  DType dt = ps_.dtype();
  qkv_out_ = acts.take(dt, {batch, seq, 3 * d_model_});
  y_ = acts.take(dt, {batch, seq, d_model_});
  lse_ = acts.take(dt, {batch, n_head_, seq});
  dqkv_ = scratch.take(dt, {batch, seq, 3 * d_model_});
  dy_ = scratch.take(dt, {batch, seq, d_model_});
}

void CausalSelfAttention::forward(Tensor out, Tensor in) const {
  qkv_.forward(qkv_out_.reshape({qkv_out_.rows(), 3 * d_model_}), in);
  ps_.backend().attention(y_, lse_, qkv_out_, n_head_);
  proj_.forward(out, y_.reshape({y_.rows(), d_model_}));
}

void CausalSelfAttention::backward(Tensor din, Tensor dout, Tensor in) const {
  const int64_t rows = y_.rows();
  proj_.backward(dy_.reshape({rows, d_model_}), dout, y_.reshape({rows, d_model_}));
  ps_.backend().attention_backward(dqkv_, dy_, qkv_out_, y_, lse_, n_head_);
  qkv_.backward(din, dqkv_.reshape({rows, 3 * d_model_}), in);
}

}  // namespace trainrun
