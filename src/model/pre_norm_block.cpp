#include "trainrun/model/pre_norm_block.h"

#include "trainrun/core/rng.h"
#include "trainrun/model/layernorm.h"
#include "trainrun/model/mlp.h"
#include "trainrun/model/rmsnorm.h"
#include "trainrun/model/swiglu_mlp.h"

namespace trainrun {

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq,
                                   const Tensor* doc_start) {
  const int64_t rows = batch * seq, dm = dim_;
  const DType dt = ps_.dtype();
  p_.norm1.bind(acts, rows);
  p_.norm2.bind(acts, rows);
  p_.attn.bind(acts, scratch, batch, seq, doc_start);
  p_.ffn.bind(acts, scratch, rows);
  n1_ = acts.take(dt, {rows, dm});
  ao_ = acts.take(dt, {rows, dm});
  x1_ = acts.take(dt, {rows, dm});
  n2_ = acts.take(dt, {rows, dm});
  mo_ = acts.take(dt, {rows, dm});
  dmo_ = scratch.take(dt, {rows, dm});
  dn2_ = scratch.take(dt, {rows, dm});
  dx1_ = scratch.take(dt, {rows, dm});
  dao_ = scratch.take(dt, {rows, dm});
  dn1_ = scratch.take(dt, {rows, dm});
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::forward(Tensor out, Tensor x, float dropout, uint64_t seed) const {
  Backend& be = ps_.backend();
  p_.norm1.forward(n1_, x);
  p_.attn.forward(ao_, n1_);
  if (dropout > 0) be.dropout(ao_, ao_, dropout, hash_combine(seed, 1));
  be.add(x1_, x, ao_);
  p_.norm2.forward(n2_, x1_);
  p_.ffn.forward(mo_, n2_);
  if (dropout > 0) be.dropout(mo_, mo_, dropout, hash_combine(seed, 2));
  be.add(out, x1_, mo_);
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::backward(Tensor dx, Tensor dout, Tensor x, float dropout,
                                       uint64_t seed) const {
  Backend& be = ps_.backend();
  // The scratch is shared by all blocks. Each buffer is either overwritten by its first writer
  // (the branches' input gradients, the residual copies) or zeroed before an op accumulates
  // into it, so no pass zeroes the whole scratch (it was 3% of a step).
  // out = x1 + drop(mo). Without dropout, mo's gradient is dout itself (the modules only read
  // the gradient they are given), which saves a copy of the stream per residual branch.
  Tensor dmo = dout.reshape({dmo_.dim(0), dmo_.dim(1)});
  if (dropout > 0) {
    be.fill(dmo_, 0.0);
    be.dropout_backward(dmo_, dout, dropout, hash_combine(seed, 2));
    dmo = dmo_;
  }
  p_.ffn.backward(dn2_, dmo, n2_, GradWrite::overwrite);
  be.copy(dx1_, dout);
  p_.norm2.backward(dx1_, dn2_, x1_);
  // x1 = x + drop(ao)
  Tensor dao = dx1_;
  if (dropout > 0) {
    be.fill(dao_, 0.0);
    be.dropout_backward(dao_, dx1_, dropout, hash_combine(seed, 1));
    dao = dao_;
  }
  p_.attn.backward(dn1_, dao, n1_, GradWrite::overwrite);
  be.copy(dx, dx1_);
  p_.norm1.backward(dx, dn1_, x);
}

// The two families' blocks (block.h, llama_block.h).
template class PreNormBlock<LayerNorm, MLP>;
template class PreNormBlock<RMSNorm, SwiGluMLP>;

}  // namespace trainrun
