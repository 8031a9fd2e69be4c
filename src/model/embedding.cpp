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
  ps_.backend().embedding_backward(ps_.grad(w_), dout, ids);
}

}  // namespace trainrun
