// Starting a run from a Hugging Face model (model.init_from: a folder with config.json and
// model.safetensors, or shards and their index; docs/huggingface.md). config.json must describe
// the experiment's model exactly (family and every shape; what trainrun cannot compute, such as
// another norm epsilon or a rope_scaling, is refused with the reason), and the weights must be
// exactly the tensors the table in hf_layout.h names, each of its shape; F32, F16 and BF16 are
// converted to float32 exactly. A GPT-2 position table longer than model.seq_len keeps its first
// seq_len rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/core/param_entry.h"

namespace trainrun {

// The problems of `dir`'s config.json against `m` ("" when it describes `m`). Reads no weights.
std::string hf_config_mismatch(const std::string& dir, const ModelConfig& m);

// Whether `path` is a Hugging Face model folder: a directory holding config.json.
bool is_hf_model_dir(const std::string& path);

// The model `dir`'s config.json describes, in trainrun's keys, with model.init_from = dir:
// gpt2 (n_embd, n_layer, n_head, vocab_size) or llama (hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads, intermediate_size, rope_theta, tie_word_embeddings).
// seq_len: its n_positions or max_position_embeddings, at most `max_seq_len` (a published
// Llama's 131072 positions would be a context nobody samples or plans by default). Throws
// ConfigError (exit 2) for another architecture, or what trainrun cannot compute (as init_from).
ModelConfig hf_model_config(const std::string& dir, int max_seq_len);

// The config loader's ModelSource (config.h): for an init_from that is a Hugging Face folder,
// the model its config.json describes (hf_model_config with no bound on seq_len, which the
// loader never fills); nullopt for anything else, which starting the run then refuses.
std::optional<ModelConfig> hf_model_source(const std::string& init_from);

// `trainrun plan DIR`: an experiment of that model (seq_len at most 8192), synthetic data unless
// `overrides` name data.*, then `overrides`, validated as a config is.
Experiment hf_experiment(const std::string& dir, const std::vector<std::string>& overrides);

// Fills `weights` (laid out by `params`, as ParamStore's flat buffer: params[i] at its offset)
// from the model in `dir`. Throws ConfigError (exit 2) for a config.json that does not match or
// a missing, extra or misshapen tensor, CheckpointError for a file that cannot be read.
void load_hf(const std::string& dir, const ModelConfig& m, const std::vector<ParamEntry>& params,
             float* weights);

}  // namespace trainrun
