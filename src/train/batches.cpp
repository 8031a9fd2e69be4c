#include "batches.h"

#include "trainrun/core/rng.h"

namespace trainrun {

Batches::Batches(const Experiment& exp, int rank, int world, int micro)
    : run_seed_(exp.seed),
      batch_size_(exp.train.batch_size),
      rank_(rank),
      world_(world),
      micro_(micro),
      train_(open_dataset(exp.data, Split::train, exp.model.vocab_size, exp.seed)),
      val_(open_dataset(exp.data, Split::val, exp.model.vocab_size, exp.seed)),
      train_loader_(std::make_unique<DataLoader>(*train_, exp.seed, exp.model.seq_len)),
      val_loader_(std::make_unique<DataLoader>(*val_, hash_combine(exp.seed, 0x7661ull),
                                               exp.model.seq_len)) {
  const size_t n = static_cast<size_t>(micro) * static_cast<size_t>(exp.model.seq_len);
  x_.resize(n);
  y_.resize(n);
}

Batches::~Batches() = default;

int64_t Batches::first_sample(int64_t step, int m) const {
  return step * batch_size_ + static_cast<int64_t>(m) * micro_ * world_ +
         static_cast<int64_t>(rank_) * micro_;
}

void Batches::prefetch(int64_t step, int m) {
  train_loader_->prefetch(first_sample(step, m), micro_);
}

double Batches::next() {
  return train_loader_->next(x_.data(), y_.data());
}

void Batches::fetch_val(int64_t batch, int m) {
  val_loader_->fetch(first_sample(batch, m), micro_, x_.data(), y_.data());
}

uint64_t Batches::seed(int64_t step, int m) const {
  return hash_combine(run_seed_, static_cast<uint64_t>(first_sample(step, m)));
}

}  // namespace trainrun
