// Internal to src/hf: where each tensor of Hugging Face's layout comes from in trainrun's, one
// table that export and import both read (so the two cannot disagree). The map itself is in
// hf_layout.cpp's header comment and docs/huggingface.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// HF tensor `hf` is trainrun parameter `param` as it is (same), transposed (a [r, c] matrix
// stored [c, r]: GPT-2's Conv1D), or its rows [row0, row0 + rows) (a fused projection split).
struct HfPiece {
  enum class Kind { same, transposed, rows };
  std::string hf, param;
  Kind kind = Kind::same;
  int64_t row0 = 0, rows = 0;
};

// Every HF tensor of the model `m` (its head untied: llama's lm_head), in transformers' order.
// Throws ConfigError for the mlp family.
std::vector<HfPiece> hf_layout(const ModelConfig& m, bool untied_head);

// config.json for `m` (`torch_dtype`: "float32" | "bfloat16").
std::string hf_config_json(const ModelConfig& m, bool untied_head, const char* torch_dtype);

}  // namespace trainrun
