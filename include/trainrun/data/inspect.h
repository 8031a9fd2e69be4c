// `trainrun data inspect`: what the training data of a config, or a shard path, holds: per source
// its tokens, samples per epoch, vocabulary use and documents; a mixture's realised proportions
// over the run's samples; the first samples decoded with the data's tokenizer.
#pragma once

#include <cstdint>
#include <string>

#include "trainrun/core/experiment.h"

namespace trainrun {

struct InspectRequest {
  int samples = 2;   // the stream's first samples, decoded
  int64_t eot = -1;  // the end-of-text id between documents; -1: the tokenizer's <|endoftext|>
  bool json = false;
};

// The train split of exp.data as the run would read it (the same stream, the same checks:
// throws DataError, exit 3, for data the run would refuse).
std::string inspect_data(const Experiment& exp, const InspectRequest& req);

// A shard file, directory (train.bin, val.bin, manifest.json) or glob, as one source read in
// windows of seq_len + 1 tokens.
std::string inspect_shards(const std::string& path, int seq_len, const InspectRequest& req);

}  // namespace trainrun
