#include "batches.h"

#include <fmt/format.h>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/documents.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"
#include "trainrun/data/tokenizer.h"

namespace trainrun {

namespace {

// The id between documents: data.eot, else the run's tokenizer's <|endoftext|>.
int32_t document_eot(const DataConfig& d) {
  if (d.eot >= 0) return static_cast<int32_t>(d.eot);
  const std::unique_ptr<Tokenizer> tok = data_tokenizer(d);
  if (tok && tok->end_of_text() >= 0) return tok->end_of_text();
  throw DataError(fmt::format(
      "data.document_masking: the shards have no document index (train.idx, val.idx) and the "
      "id between documents is not known ({}): prepare them again with this trainrun's `data "
      "prepare` (it writes the indexes), or set data.eot to the id `data prepare` wrote between "
      "documents (byte-level shards: 0, unless prepared with --eot)",
      tok ? "the tokenizer has no <|endoftext|>" : "no tokenizer on record for the shards"));
}

}  // namespace

Batches::Batches(const Experiment& exp, int rank, int world, int micro)
    : run_seed_(exp.seed),
      batch_size_(exp.train.batch_size),
      rank_(rank),
      world_(world),
      micro_(micro),
      train_(open_sample_stream(exp.data, Split::train, exp.model.vocab_size, exp.seed,
                                exp.model.seq_len)),
      val_(open_sample_stream(exp.data, Split::val, exp.model.vocab_size, exp.seed,
                              exp.model.seq_len)),
      train_loader_(std::make_unique<DataLoader>(*train_)),
      val_loader_(std::make_unique<DataLoader>(*val_)) {
  const size_t n = static_cast<size_t>(micro) * static_cast<size_t>(exp.model.seq_len);
  x_.resize(n);
  y_.resize(n);
  if (exp.data.document_masking) {
    masking_ = true;
    if (!train_->has_document_index() || !val_->has_document_index()) eot_ = document_eot(exp.data);
    doc_start_.resize(n);
  }
}

void Batches::find_documents(const SampleStream& stream, int64_t first) {
  if (!masking_) return;
  const int64_t T = static_cast<int64_t>(x_.size()) / micro_;
  for (int i = 0; i < micro_; ++i) {
    int32_t* row = doc_start_.data() + static_cast<ptrdiff_t>(i) * T;
    if (stream.has_document_index())
      stream.document_starts(first + i, row);
    else
      document_starts(x_.data() + static_cast<ptrdiff_t>(i) * T, 1, T, *eot_, row);
  }
}

Batches::~Batches() = default;

int64_t Batches::first_sample(int64_t step, int m) const {
  return step * batch_size_ + static_cast<int64_t>(m) * micro_ * world_ +
         static_cast<int64_t>(rank_) * micro_;
}

void Batches::prefetch(int64_t step, int m) {
  prefetched_step_ = step;
  prefetched_m_ = m;
  train_loader_->prefetch(first_sample(step, m), micro_);
}

double Batches::next() {
  const double waited = train_loader_->next(x_.data(), y_.data());
  find_documents(*train_, first_sample(prefetched_step_, prefetched_m_));
  // Every rank reads micro-batch m of the step at once: the world has now read up to its end.
  samples_seen_ =
      prefetched_step_ * batch_size_ + static_cast<int64_t>(prefetched_m_ + 1) * micro_ * world_;
  return waited;
}

void Batches::state_dict(StateDict& out) {
  out.put(state_name::samples_seen, samples_seen_);
  out.put(state_name::seed, run_seed_);
}

void Batches::load_state_dict(StateSource& in) {
  const uint64_t seed = read_uint(in, state_name::seed);
  if (seed != run_seed_)
    throw CheckpointError(fmt::format(
        "checkpoint {}: its data stream has seed {}, this run's is {}: it belongs to another "
        "run",
        in.path(), seed, run_seed_));
  samples_seen_ = read_int(in, state_name::samples_seen);  // the checkpoint checked it is >= 0
}

void Batches::fetch_val(int64_t batch, int m) {
  val_loader_->fetch(first_sample(batch, m), micro_, x_.data(), y_.data());
  find_documents(*val_, first_sample(batch, m));
}

std::vector<std::string> Batches::epochs_begun(int64_t step) const {
  std::vector<std::string> out;
  if (train_->order() != DataOrder::epochs) return out;
  const auto before = train_->counts(step * batch_size_);
  const auto after = train_->counts((step + 1) * batch_size_);
  for (size_t s = 0; s < before.size(); ++s) {
    const int64_t per_epoch = train_->epoch_samples(s);
    // Sample k of a source is in its epoch k / per_epoch (0-based); the step begins epoch e
    // when it reads that epoch's first sample.
    const int64_t from = before[s] > 0 ? (before[s] - 1) / per_epoch : 0;
    const int64_t to = after[s] > 0 ? (after[s] - 1) / per_epoch : 0;
    if (to == from) continue;
    const std::string who =
        train_->num_sources() > 1 ? fmt::format("source '{}'", train_->source(s).name) : "data";
    out.push_back(fmt::format("{} begins epoch {}: all {} samples read{}", who, to + 1, per_epoch,
                              to - from > 1 ? fmt::format(" {} times over", to) : ""));
  }
  return out;
}

uint64_t Batches::seed(int64_t step, int m) const {
  return hash_combine(run_seed_, static_cast<uint64_t>(first_sample(step, m)));
}

}  // namespace trainrun
