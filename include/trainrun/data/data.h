// Data: token datasets (our shards, llm.c shards, text, a built-in Markov source) and a loader
// whose batches are a pure function of (seed, global sample index), whatever the world size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// One split (train or val) of token data, read-only, usually memory-mapped.
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t num_tokens() const = 0;
  // Copies tokens [pos, pos + n) of the (virtually concatenated) stream into out.
  virtual void read(int64_t pos, int64_t n, int32_t* out) const = 0;
  virtual std::string describe() const = 0;  // "2 shards, 1003854 tokens (data/x/train.bin ...)"
  // Lowest achievable loss in nats/token when known (built-in Markov source), else NaN.
  virtual double entropy_rate() const = 0;
  // True when every shard has a document index (docs/data-format.md), opened because
  // data.document_masking asked for it; then document_starts answers for any range.
  virtual bool has_document_index() const { return false; }
  // For tokens [pos, pos + n): out[i] = where the document holding token pos + i starts,
  // relative to pos and at least 0 (documents.h's doc_start of a window). Only with an index.
  virtual void document_starts(int64_t pos, int64_t n, int32_t* out) const;
};

enum class Split { train, val };

// Opens the split that `data` describes. Checks magic, version, size and that every token is
// < vocab_size; throws DataError (exit 3) naming the file and the problem. With
// data.document_masking, also the shards' document indexes where they have them.
std::unique_ptr<TokenDataset> open_dataset(const DataConfig& data, Split split, int vocab_size,
                                           uint64_t seed);

// Writes a shard in trainrun's format (docs/data-format.md).
void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens, int vocab_size);

class SampleStream;  // sample_stream.h

// Reads samples of a SampleStream as inputs (tokens [0, T) of each window) and targets
// ([1, T]). A background thread prepares the next request. The stream must outlive the loader.
class DataLoader {
 public:
  explicit DataLoader(const SampleStream& stream);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Synchronous: samples [first, first + count) into x, y ([count, seq_len] each).
  void fetch(int64_t first, int count, int32_t* x, int32_t* y) const;
  // Asynchronous: start preparing samples [first, first + count); next() returns them.
  void prefetch(int64_t first, int count);
  // Waits for the prefetched request and copies it out. Returns seconds spent waiting.
  double next(int32_t* x, int32_t* y);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainrun
