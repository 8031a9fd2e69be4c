// Embedding: a lookup table [num, dim]; rows for ids. Used for tokens, positions and the MLP
// model's context window (whose concatenated embeddings are just the rows laid out in order).
#pragma once

#include <string>

#include "trainrun/model/params.h"

namespace trainrun {

class Embedding {
 public:
  Embedding(ParamStore& ps, const std::string& name, int num, int dim, float init_std);
  void forward(Tensor out, Tensor ids) const;
  void backward(Tensor dout, Tensor ids) const;
  Tensor weight() const { return ps_.param(w_); }
  Tensor weight_grad() const { return ps_.grad(w_); }
  // How the next write of the table's gradient goes (ParamStore::grad_write): a tied LM head
  // that writes it before backward() asks here.
  GradWrite weight_grad_write() const { return ps_.grad_write(w_); }

 private:
  ParamStore& ps_;
  int w_;
};

}  // namespace trainrun
