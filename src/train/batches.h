// Batches: which samples this rank trains and evaluates on, and the loaders that read them.
// Sample indices are global and follow from the step alone, which is what makes a resume exact
// on any world size: micro-batch m of step s (0-based) on rank r starts at sample
//   s * batch_size + m * micro * world + r * micro
// and holds `micro` consecutive samples. The validation batches are the same samples every
// evaluation, so evaluations are comparable across steps. With data.document_masking each
// micro-batch also carries its document starts (documents.h): from the shards' document indexes
// where every shard has one, else found from the end-of-text id in the samples.
//
// Its checkpointed state (state_dict.h) is the data stream's cursor, data/samples_seen (the next
// global sample index: every sample before it has been trained on), and data/seed; a restore
// checks both belong to this run's stream.
//
// Thread safety: the step loop's thread only (each loader prefetches on its own thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/core/experiment.h"
#include "trainrun/data/data.h"
#include "trainrun/data/sample_stream.h"

namespace trainrun {

class Batches final : public Stateful {
 public:
  // Opens both splits (DataError for bad data). `micro`: sequences per micro-batch on a rank.
  Batches(const Experiment& exp, int rank, int world, int micro);
  ~Batches() override;
  Batches(const Batches&) = delete;
  Batches& operator=(const Batches&) = delete;

  // Starts loading micro-batch m of step `step` (0-based), for next() to return.
  void prefetch(int64_t step, int m);
  // Waits for the prefetched micro-batch and puts it in x(), y(); returns the seconds waited.
  double next();
  // Validation batch `batch`'s micro-batch m into x(), y(), synchronously.
  void fetch_val(int64_t batch, int m);
  // Inputs and targets of the current micro-batch: [micro, seq_len] each.
  const int32_t* x() const { return x_.data(); }
  const int32_t* y() const { return y_.data(); }
  // Its document starts [micro, seq_len] with data.document_masking, else nullptr.
  const int32_t* doc_start() const { return masking_ ? doc_start_.data() : nullptr; }
  // The randomness (dropout) of micro-batch m of `step`: a function of its first sample only.
  uint64_t seed(int64_t step, int m) const;

  const SampleStream& train() const { return *train_; }
  const SampleStream& val() const { return *val_; }
  // What step `step` (0-based) begins in the sources' epochs, one sentence per source that
  // starts a new epoch in it ("source 'web' begins epoch 2 (wrapped after 1234 samples an
  // epoch)"); nothing in windows order, whose samples are drawn with replacement.
  std::vector<std::string> epochs_begun(int64_t step) const;

  // The next global sample index of the training stream: where the micro-batches next()
  // returned end, counting every rank's.
  int64_t samples_seen() const { return samples_seen_; }
  void state_dict(StateDict& out) override;
  // Throws CheckpointError when the checkpoint's stream has another seed.
  void load_state_dict(StateSource& in) override;

 private:
  int64_t first_sample(int64_t step, int m) const;
  // The document starts of the micro-batch in x_, whose first sample is `first` of `stream`.
  void find_documents(const SampleStream& stream, int64_t first);

  uint64_t run_seed_;
  int64_t batch_size_;
  int rank_, world_, micro_;
  std::unique_ptr<SampleStream> train_, val_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::vector<int32_t> x_, y_;
  bool masking_ = false;        // data.document_masking
  std::optional<int32_t> eot_;  // with masking, where a split has no document index
  std::vector<int32_t> doc_start_;
  int64_t prefetched_step_ = 0;  // the prefetched train micro-batch: step and index m
  int prefetched_m_ = 0;
  int64_t samples_seen_ = 0;
};

}  // namespace trainrun
