#include "trainrun/model/pre_norm_block.h"

#include "trainrun/core/rng.h"
#include "trainrun/model/layernorm.h"
#include "trainrun/model/mlp.h"
#include "trainrun/model/rmsnorm.h"
#include "trainrun/model/swiglu_mlp.h"

namespace trainrun {

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::bind_kept(Arena& acts, int64_t rows) {
  p_.norm1.bind(acts, rows);
  n1_ = acts.take(ps_.dtype(), {rows, dim_});
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::bind(ActivationArenas acts, Arena& scratch, int64_t batch,
                                   int64_t seq, const Tensor* doc_start) {
  const int64_t rows = batch * seq, dm = dim_;
  const DType dt = ps_.dtype();
  p_.norm2.bind(acts.pointwise, rows);
  p_.attn.bind(acts.kept, scratch, batch, seq, doc_start);
  p_.ffn.bind(acts, scratch, rows);
  ao_ = acts.kept.take(dt, {rows, dm});
  x1_ = acts.pointwise.take(dt, {rows, dm});
  n2_ = acts.pointwise.take(dt, {rows, dm});
  mo_ = acts.pointwise.take(dt, {rows, dm});
  dmo_ = scratch.take(dt, {rows, dm});
  dn2_ = scratch.take(dt, {rows, dm});
  dao_ = scratch.take(dt, {rows, dm});
  dn1_ = scratch.take(dt, {rows, dm});
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::branches(Tensor x, float dropout, uint64_t seed, bool normed) const {
  Backend& be = ps_.backend();
  if (!normed) p_.norm1.forward(n1_, x);
  p_.attn.forward(ao_, n1_);
  if (dropout > 0) be.dropout(ao_, ao_, dropout, hash_combine(seed, 1));
  p_.norm2.forward_residual(x1_, n2_, x, ao_);  // x1 = x + ao, n2 = norm2(x1)
  p_.ffn.forward(mo_, n2_);
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::recompute(Tensor x, float dropout, uint64_t seed, bool normed) const {
  // The output (and mo's dropout, which only the output reads) is not needed by backward.
  branches(x, dropout, seed, normed);
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::recompute_pointwise(Tensor x) const {
  p_.norm2.forward_residual(x1_, n2_, x, ao_);
  p_.ffn.recompute_pointwise();
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::forward(Tensor out, Tensor x, float dropout, uint64_t seed,
                                      bool normed, NormOut next) const {
  Backend& be = ps_.backend();
  branches(x, dropout, seed, normed);
  if (dropout > 0) be.dropout(mo_, mo_, dropout, hash_combine(seed, 2));
  if (next.norm)
    next.norm->forward_residual(out, next.out, x1_, mo_);  // out = x1 + mo, next.norm(out)
  else
    be.add(out, x1_, mo_);
}

template <class Norm, class Ffn>
void PreNormBlock<Norm, Ffn>::backward(Tensor dstream, Tensor x, float dropout,
                                       uint64_t seed) const {
  Backend& be = ps_.backend();
  // The scratch is shared by all blocks. Each buffer is either overwritten by its first writer
  // (the branches' input gradients) or zeroed before an op accumulates into it, so no pass
  // zeroes the whole scratch (it was 3% of a step).
  // out = x1 + drop(mo): d(out) reaches x1 unchanged and mo through the dropout. Without
  // dropout, mo's gradient is the stream's itself (the modules only read the gradient they are
  // given), which saves a copy of the stream per residual branch.
  const Tensor ds = dstream.reshape({dmo_.dim(0), dmo_.dim(1)});
  Tensor dmo = ds;
  if (dropout > 0) {
    be.fill(dmo_, 0.0);
    be.dropout_backward(dmo_, ds, dropout, hash_combine(seed, 2));
    dmo = dmo_;
  }
  p_.ffn.backward(dn2_, dmo, n2_, GradWrite::overwrite);
  // d(x1) = d(out) + norm2's input gradient: accumulated in place, after the ffn has read d(out)
  // (ops run in order), so the stream now holds d(x1).
  p_.norm2.backward(ds, dn2_, x1_);
  // x1 = x + drop(ao): the same again one branch down; the stream ends as d(x).
  Tensor dao = ds;
  if (dropout > 0) {
    be.fill(dao_, 0.0);
    be.dropout_backward(dao_, ds, dropout, hash_combine(seed, 1));
    dao = dao_;
  }
  p_.attn.backward(dn1_, dao, n1_, GradWrite::overwrite);
  p_.norm1.backward(ds, dn1_, x);
}

// The two families' blocks (block.h, llama_block.h).
template class PreNormBlock<LayerNorm, MLP>;
template class PreNormBlock<RMSNorm, SwiGluMLP>;

}  // namespace trainrun
