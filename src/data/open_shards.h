// Token shards as one split, for data.train and for each data.mix source: the keys name them in
// messages ("data.mix[1].path='...': no such file").
#pragma once

#include <memory>
#include <string>

#include "trainrun/data/data.h"

namespace trainrun {

struct ShardSpec {
  std::string train, train_key;  // a file, directory or glob, and the key that set it
  std::string val, val_key;      // "" = the last val_fraction of train is val
  std::string tokenizer;         // checked against the shards' manifest.json
  double val_fraction = 0.1;
  bool documents = false;  // open and check the shards' document indexes (document_index.h)
  int64_t eot = -1;        // data.eot: an index written for another id is refused
};

// Throws DataError (exit 3) naming the key, the file and the fix.
std::unique_ptr<TokenDataset> open_shards(const ShardSpec& spec, Split split, int vocab_size);

}  // namespace trainrun
