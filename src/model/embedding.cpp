#include "trainrun/model/embedding.h"

#include <limits>

#include "trainrun/core/no_id.h"

namespace trainrun {

Embedding::Embedding(ParamStore& ps, const std::string& name, int num, int dim, float init_std,
                     bool vocab_parallel)
    : ps_(ps), num_(num) {
  w_ = ps.declare(name + ".weight", {num, dim}, Init::normal, init_std, true,
                  vocab_parallel ? TpSplit::rows() : TpSplit{});
  const ParamInfo& p = ps.infos()[static_cast<size_t>(w_)];
  split_ = !p.pieces.empty();
  first_ = split_ ? p.pieces.front().offsets[0] : 0;
  rows_ = p.shape[0];
}

void Embedding::forward(Tensor out, Tensor ids) const {
  ps_.backend().embedding(out, ids, ps_.param(w_));
  if (split_) ps_.tp().comm->allreduce_sum(out);  // each row from the rank that holds it
}

void Embedding::backward(Tensor dout, Tensor ids) const {
  // A scatter-add has no overwriting form: a stale gradient is zeroed first (a small table,
  // unless an LM head tied to it wrote it already). Vocabulary-parallel: dout is whole on every
  // rank, and each adds the rows of its own ids.
  if (ps_.grad_write(w_) == GradWrite::overwrite) ps_.backend().fill(ps_.grad(w_), 0.0);
  ps_.backend().embedding_backward(ps_.grad(w_), dout, ids);
}

void Embedding::local_ids(const int32_t* x, int32_t* out, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = x[i];
    if (id < 0)  // never kNoId by accident
      out[i] = std::numeric_limits<int32_t>::min();
    else if (id >= num_ || (id >= first_ && id < first_ + rows_))  // past the vocabulary: past
      out[i] = static_cast<int32_t>(id - first_);                  // this part too
    else
      out[i] = kNoId;
  }
}

}  // namespace trainrun
