// Config: YAML -> Experiment through one schema table (src/config/schema.cpp) that drives
// parsing, defaults, validation, --set overrides, the resolved YAML and the key reference docs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// Where the model keys a config leaves out come from when model.init_from is set: the model the
// init_from folder describes, or nullopt when it is no such folder (the keys keep their
// defaults, and starting the run says what is wrong with the folder). hf/hf_import.h's
// hf_model_source reads a Hugging Face folder's config.json. It may throw ConfigError.
using ModelSource = std::function<std::optional<ModelConfig>(const std::string& init_from)>;

// Loads `path`, applies `overrides` ("key.path=YAML value", in order), fills the model keys
// neither gave from `model_source` (when given and model.init_from is set: the family, sizes,
// heads, key/value heads, SwiGLU width, rope_theta and tie_embeddings; never seq_len, the run's
// own context), validates everything (types, ranges, unknown keys with "did you mean",
// cross-field rules) and returns the result. Batch divisibility is checked against the config's
// own distributed.nproc * nodes; callers with a concrete world size call validate_for_world.
// Throws ConfigError (exit 2) naming file, key and line:column (a filled key: the folder's
// config.json).
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                           const ModelSource& model_source = {});

// Same, from YAML text (path is used in messages only).
Experiment parse_experiment(const std::string& yaml_text, const std::string& path,
                            const std::vector<std::string>& overrides,
                            const ModelSource& model_source = {});

// Applies overrides to an already-resolved experiment (used on resume). Keys that change the
// model's shape or data are refused with a ConfigError naming the key when `resume` is true.
void apply_overrides(Experiment& exp, const std::vector<std::string>& overrides, bool resume);

// Cross-field rules against a concrete world size (ranks).
void validate_for_world(const Experiment& exp, int world_size);

// The resolved config as YAML: every key, defaults filled. Round-trips through parse_experiment.
std::string to_yaml(const Experiment& exp);

// Markdown reference of every key: type, default, allowed values, description.
std::string schema_markdown();

}  // namespace trainrun
