// Embedding: a lookup table [num, dim]; rows for ids. Used for tokens, positions and the MLP
// model's context window (whose concatenated embeddings are just the rows laid out in order).
#pragma once

#include <string>

#include "trainrun/model/params.h"

namespace trainrun {

class Embedding {
 public:
  // vocab_parallel: under tensor parallelism (ParamStore::tp()) the table splits by rows
  // (Megatron's VocabParallelEmbedding): this rank holds rows [first(), first() + rows()), takes
  // its ids as local_ids() gives them (kNoId for another rank's), and forward sums the ranks'
  // partial lookups (an all-reduce), so its output is whole on every rank.
  Embedding(ParamStore& ps, const std::string& name, int num, int dim, float init_std,
            bool vocab_parallel = false);
  void forward(Tensor out, Tensor ids) const;
  void backward(Tensor dout, Tensor ids) const;
  Tensor weight() const { return ps_.param(w_); }
  Tensor weight_grad() const { return ps_.grad(w_); }
  // How the next write of the table's gradient goes (ParamStore::grad_write): a tied LM head
  // that writes it before backward() asks here.
  GradWrite weight_grad_write() const { return ps_.grad_write(w_); }
  // This rank's rows of the table (the whole table unless vocabulary-parallel).
  int64_t first() const { return first_; }
  int64_t rows() const { return rows_; }
  // The ids `x` as this rank's part reads them: shifted to its rows, kNoId (core/no_id.h) for
  // another rank's; an id outside the table (a corrupt batch) stays outside, for the op to refuse.
  void local_ids(const int32_t* x, int32_t* out, int64_t n) const;

 private:
  ParamStore& ps_;
  int w_;
  bool split_ = false;  // vocabulary-parallel over more than one rank
  int64_t first_ = 0, rows_ = 0, num_ = 0;
};

}  // namespace trainrun
