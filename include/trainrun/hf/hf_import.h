// Starting a run from a Hugging Face model (model.init_from: a folder with config.json and
// model.safetensors, or shards and their index; docs/huggingface.md). config.json must describe
// the experiment's model exactly (family and every shape; what trainrun cannot compute, such as
// another norm epsilon or a rope_scaling, is refused with the reason), and the weights must be
// exactly the tensors the table in hf_layout.h names, each of its shape; F32, F16 and BF16 are
// converted to float32 exactly. A GPT-2 position table longer than model.seq_len keeps its first
// seq_len rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/core/param_entry.h"

namespace trainrun {

// The problems of `dir`'s config.json against `m` ("" when it describes `m`). Reads no weights.
std::string hf_config_mismatch(const std::string& dir, const ModelConfig& m);

// Fills `weights` (laid out by `params`, as ParamStore's flat buffer: params[i] at its offset)
// from the model in `dir`. Throws ConfigError (exit 2) for a config.json that does not match or
// a missing, extra or misshapen tensor, CheckpointError for a file that cannot be read.
void load_hf(const std::string& dir, const ModelConfig& m, const std::vector<ParamEntry>& params,
             float* weights);

}  // namespace trainrun
