#include "trainrun/model/embedding.h"

namespace trainrun {

Embedding::Embedding(ParamStore& ps, const std::string& name, int num, int dim, float init_std)
    : ps_(ps) {
  w_ = ps.declare(name + ".weight", {num, dim}, Init::normal, init_std, true);
}

void Embedding::forward(Tensor out, Tensor ids) const {
  ps_.backend().embedding(out, ids, ps_.param(w_));
}

void Embedding::backward(Tensor dout, Tensor ids) const {
  // A scatter-add has no overwriting form: a stale gradient is zeroed first (a small table,
  // unless an LM head tied to it wrote it already).
  if (ps_.grad_write(w_) == GradWrite::overwrite) ps_.backend().fill(ps_.grad(w_), 0.0);
  ps_.backend().embedding_backward(ps_.grad(w_), dout, ids);
}

}  // namespace trainrun
