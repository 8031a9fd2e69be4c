#include "trainrun/model/block.h"

#include <cmath>

#include "trainrun/rng.h"

namespace trainrun {

namespace {
// GPT-2: residual projections are scaled by 1/sqrt(2 * n_layer) so the residual stream's
// variance does not grow with depth.
float proj_std(int n_layer) {
  return 0.02f / std::sqrt(2.0f * static_cast<float>(n_layer));
}
}  // namespace

TransformerBlock::TransformerBlock(ParamStore& ps, const std::string& name, int d_model, int n_head,
                                   int n_layer)
    : ps_(ps),
      begin_(ps.numel()),
      ln1_(ps, name + ".ln1", d_model),
      attn_(ps, name + ".attn", d_model, n_head, proj_std(n_layer)),
      ln2_(ps, name + ".ln2", d_model),
      mlp_(ps, name + ".mlp", d_model, proj_std(n_layer)),
      dim_(d_model) {
  end_ = ps.numel();
}

void TransformerBlock::bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq) {
  const int64_t rows = batch * seq;
  const DType dt = ps_.dtype();
  scratch_begin_ = scratch.mark();
  ln1_.bind(acts, rows);
  ln2_.bind(acts, rows);
  attn_.bind(acts, scratch, batch, seq);
  mlp_.bind(acts, scratch, rows);
  const int64_t dm = dim_;
  l1_ = acts.take(dt, {rows, dm});
  ao_ = acts.take(dt, {rows, dm});
  x1_ = acts.take(dt, {rows, dm});
  l2_ = acts.take(dt, {rows, dm});
  mo_ = acts.take(dt, {rows, dm});
  dmo_ = scratch.take(dt, {rows, dm});
  dl2_ = scratch.take(dt, {rows, dm});
  dx1_ = scratch.take(dt, {rows, dm});
  dao_ = scratch.take(dt, {rows, dm});
  dl1_ = scratch.take(dt, {rows, dm});
  scratch_end_ = scratch.mark();
  scratch_ = &scratch;
}

void TransformerBlock::forward(Tensor out, Tensor x, float dropout, uint64_t seed) const {
  Backend& be = ps_.backend();
  ln1_.forward(l1_, x);
  attn_.forward(ao_, l1_);
  if (dropout > 0) be.dropout(ao_, ao_, dropout, hash_combine(seed, 1));
  be.add(x1_, x, ao_);
  ln2_.forward(l2_, x1_);
  mlp_.forward(mo_, l2_);
  if (dropout > 0) be.dropout(mo_, mo_, dropout, hash_combine(seed, 2));
  be.add(out, x1_, mo_);
}

void TransformerBlock::backward(Tensor dx, Tensor dout, Tensor x, float dropout,
                                uint64_t seed) const {
  Backend& be = ps_.backend();
  // The scratch is shared by all blocks and every backward op accumulates: start from zero.
  scratch_->zero(scratch_begin_, scratch_end_);
  // out = x1 + drop(mo)
  be.dropout_backward(dmo_, dout, dropout, hash_combine(seed, 2));
  mlp_.backward(dl2_, dmo_, l2_);
  be.accumulate(dx1_, dout);
  ln2_.backward(dx1_, dl2_, x1_);
  // x1 = x + drop(ao)
  be.dropout_backward(dao_, dx1_, dropout, hash_combine(seed, 1));
  attn_.backward(dl1_, dao_, l1_);
  be.accumulate(dx, dx1_);
  ln1_.backward(dx, dl1_, x);
}

}  // namespace trainrun
