// The train/val split of a token stream (docs/data-format.md, "Train and val splits"): the first
// (1 - val_fraction) of the tokens are train, the rest val. data.text, data.synthetic, shards
// without data.val and the byte-level `data prepare` all cut here.
#pragma once

#include <cstdint>

namespace trainrun {

inline int64_t train_length(int64_t total, double val_fraction) {
  return static_cast<int64_t>(static_cast<double>(total) * (1.0 - val_fraction));
}

}  // namespace trainrun
