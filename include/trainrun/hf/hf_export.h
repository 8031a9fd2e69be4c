// A trained model in Hugging Face's layout (docs/huggingface.md): config.json for
// GPT2LMHeadModel or LlamaForCausalLM, generation_config.json and the weights as safetensors,
// named and laid out as transformers reads them. trainrun's gpt is GPT-2 exactly (pre-LayerNorm,
// eps 1e-5, tanh GELU, learned positions, biases, the head tied to wte); its llama is
// transformers' Llama (RMSNorm eps 1e-5, rotate-half RoPE, grouped-query attention, SwiGLU, no
// biases, the head tied or its own). What a config field cannot say is refused with the reason
// (the mlp family, dropout during training only is fine: it is not part of the weights).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/checkpoint/safetensors.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct HfModel {
  std::string config_json, generation_config_json;
  std::vector<HfTensor> tensors;  // in transformers' order
};

// The model of `ck` (whose config is `exp`) in Hugging Face's layout. Throws ConfigError naming
// what cannot be expressed (model.type mlp).
HfModel to_hf(const Experiment& exp, const CheckpointData& ck, SafeDtype dtype);

// Writes `model` into `dir` (created; files replaced durably): config.json,
// generation_config.json, model.safetensors (or shards of at most max_shard_bytes and their
// index).
void write_hf(const std::string& dir, const HfModel& model, SafeDtype dtype,
              uint64_t max_shard_bytes);

}  // namespace trainrun
