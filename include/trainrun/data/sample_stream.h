// SampleStream: the tokens each global sample index reads. A stream has one source (data.train,
// data.text, data.synthetic) or several (data.mix, each with a weight); a blend gives global
// sample j a source and that source's own sample index k, and the source's order
// (data.order) gives k a window of seq_len + 1 tokens. Everything is a pure function of
// (seed, j), so batches do not depend on world size, every rank reads only its own samples, and
// a resume at any step, on any world size, reads exactly what the uninterrupted run would.
// docs/data-format.md ("Sampling", "Mixtures") states the formulas.
//
// Thread safety: const after construction; read() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/data/data.h"

namespace trainrun {

class SampleStream {
 public:
  struct Source {
    std::string name;
    double weight = 1;
    std::shared_ptr<const TokenDataset> data;
  };
  // `order` automatic means epochs for several sources, windows for one. Throws DataError for a
  // source shorter than seq_len + 1 tokens.
  SampleStream(std::vector<Source> sources, DataOrder order, uint64_t seed, int seq_len,
               int shuffle_block = 1);
  ~SampleStream();
  SampleStream(const SampleStream&) = delete;
  SampleStream& operator=(const SampleStream&) = delete;

  int seq_len() const;
  DataOrder order() const;  // windows or epochs, never automatic
  size_t num_sources() const;
  const Source& source(size_t s) const;
  // A source's samples per epoch: its windows of seq_len tokens (one token overlapping).
  int64_t epoch_samples(size_t s) const;

  struct Place {
    size_t source;
    int64_t k;      // the source's own sample index (epoch k / epoch_samples)
    int64_t start;  // first token of the window in the source
  };
  Place place(int64_t j) const;
  // The seq_len + 1 tokens of sample j into window.
  void read(int64_t j, int32_t* window) const;
  // Whether every source has a document index (TokenDataset::has_document_index), and then
  // the document starts [seq_len] of sample j's inputs (documents.h's doc_start of its row).
  bool has_document_index() const;
  void document_starts(int64_t j, int32_t* out) const;
  // How many of the samples [0, n) each source gives.
  std::vector<int64_t> counts(int64_t n) const;

  std::string describe() const;
  // The single source's entropy rate (built-in Markov source), else NaN.
  double entropy_rate() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The stream of one split as the config describes it (data.mix or the single source); throws
// DataError (exit 3) for bad data, as open_dataset does. `seed` is the run's: both splits read
// the data it makes (data.synthetic's chain), each in an order keyed by it and the split.
std::unique_ptr<SampleStream> open_sample_stream(const DataConfig& data, Split split,
                                                 int vocab_size, uint64_t seed, int seq_len);

// How many of the samples [0, n) each source of a mixture with these weights gives: the blend a
// SampleStream of these sources uses (what `trainrun report` shows as realised proportions).
std::vector<int64_t> mix_counts(const std::vector<double>& weights, int64_t n);

// The name a data.mix source goes by: its `name`, else its path's last component without .bin.
std::string mix_source_name(const MixSource& source);

}  // namespace trainrun
