#include "trainrun/model/attention.h"

namespace trainrun {

namespace {
// The options with n_kv_head resolved, so every op below is told the real count.
AttentionOptions resolved(AttentionOptions opt, int n_head) {
  if (opt.n_kv_head <= 0) opt.n_kv_head = n_head;
  return opt;
}
}  // namespace

CausalSelfAttention::CausalSelfAttention(ParamStore& ps, const std::string& name, int d_model,
                                         int n_head, float proj_std, AttentionOptions opt)
    : ps_(ps),
      n_head_(n_head),
      opt_(resolved(opt, n_head)),
      qkv_width_((n_head + 2 * opt_.n_kv_head) * (d_model / n_head)),
      qkv_(ps, name + ".qkv", d_model, qkv_width_, opt.bias, 0.02f, true,
           {TpMode::column,
            {int64_t{n_head} * (d_model / n_head), int64_t{opt_.n_kv_head} * (d_model / n_head),
             int64_t{opt_.n_kv_head} * (d_model / n_head)}}),
      proj_(ps, name + ".proj", d_model, d_model, opt.bias, proj_std, true, {TpMode::row}) {
  // Column-parallel qkv by whole heads (grouped-query attention keeps each kv head with its
  // query heads: the config requires tp to divide n_head and n_kv_head), the heads' attention
  // local, the output projection row-parallel.
  const int tp = ps.tp().size;
  n_head_ /= tp;
  opt_.n_kv_head /= tp;
  qkv_width_ = qkv_.out_features();
  width_ = proj_.in_features();
}

void CausalSelfAttention::bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq,
                               const Tensor* doc_start) {
  DType dt = ps_.dtype();
  doc_start_ = doc_start;
  qkv_out_ = acts.take(dt, {batch, seq, qkv_width_});
  y_ = acts.take(dt, {batch, seq, width_});
  lse_ = acts.take(ps_.stats_dtype(), {batch, n_head_, seq});
  dqkv_ = scratch.take(dt, {batch, seq, qkv_width_});
  dy_ = scratch.take(dt, {batch, seq, width_});
}

void CausalSelfAttention::forward(Tensor out, Tensor in) const {
  Backend& be = ps_.backend();
  qkv_.forward(qkv_out_.reshape({qkv_out_.rows(), qkv_width_}), in);
  // In place: backward needs only the rotated q and k (the qkv projection's input is `in`).
  if (opt_.rope) be.rope(qkv_out_, qkv_out_, n_head_, opt_.n_kv_head, opt_.rope_theta, *doc_start_);
  be.attention(y_, lse_, qkv_out_, n_head_, opt_.n_kv_head, *doc_start_);
  proj_.forward(out, y_.reshape({y_.rows(), width_}));
}

void CausalSelfAttention::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  Backend& be = ps_.backend();
  const int64_t rows = y_.rows();
  proj_.backward(dy_.reshape({rows, width_}), dout, y_.reshape({rows, width_}),
                 GradWrite::overwrite);
  // attention_backward overwrites dqkv_ (every element has one writer); rope_backward turns the
  // q and k gradients back in place, so no buffer is zeroed and none is spare.
  be.attention_backward(dqkv_, dy_, qkv_out_, y_, lse_, n_head_, opt_.n_kv_head, *doc_start_,
                        GradWrite::overwrite);
  if (opt_.rope)
    be.rope_backward(dqkv_, dqkv_, n_head_, opt_.n_kv_head, opt_.rope_theta, *doc_start_,
                     GradWrite::overwrite);
  qkv_.backward(din, dqkv_.reshape({rows, qkv_width_}), in, write);
}

}  // namespace trainrun
