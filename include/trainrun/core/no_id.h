// kNoId: a token id or target that names no row of this table and no column of these logits.
// Under tensor parallelism the embedding table and the classifier are split by vocabulary
// (model/embedding.h, model/causal_lm.h): a rank sees its own part's ids shifted to its rows and
// every other id as kNoId. The backends take it as an embedding's zero row (and no gradient),
// and as a cross-entropy row whose target another rank holds: the loss is the row's
// logsumexp alone and the gradient its softmax, with no one-hot term. Host and device code.
#pragma once

#include <cstdint>

namespace trainrun {

inline constexpr int32_t kNoId = -1;

}  // namespace trainrun
