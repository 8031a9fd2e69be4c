// The FLOPs model shared by the trainer's MFU and `trainrun plan` (stated in
// docs/observability.md): a matmul of [M,K] x [K,N] costs 2MNK forward and 4MNK backward; attention
// adds its QK^T and PV matmuls (causal: half of the T x T square, counted in full as is customary:
// 12 L T C per token for forward+backward). Elementwise ops are not counted. Each family states
// its counts in its ModelSpec (model_spec.h); these look the family up.
#pragma once

#include <cstdint>

#include "trainrun/core/experiment.h"

namespace trainrun {

int64_t parameter_count(const ModelConfig& m);
// Training FLOPs (forward + backward) per predicted token.
double train_flops_per_token(const ModelConfig& m);
// Forward FLOPs per predicted token.
double forward_flops_per_token(const ModelConfig& m);
// Predicted tokens per sequence of seq_len inputs (gpt: seq_len; mlp: 1).
int64_t targets_per_sequence(const ModelConfig& m);

}  // namespace trainrun
