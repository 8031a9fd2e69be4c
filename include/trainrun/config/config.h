// Config: YAML -> Experiment through one schema table (src/config/schema.cpp) that drives
// parsing, defaults, validation, --set overrides, the resolved YAML and the key reference docs.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

// Loads `path`, applies `overrides` ("key.path=YAML value", in order), validates everything
// (types, ranges, unknown keys with "did you mean", cross-field rules) and returns the result.
// Batch divisibility is checked against the config's own distributed.nproc * nodes; callers
// with a concrete world size call validate_for_world. Throws ConfigError (exit 2) naming file,
// key and line:column.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides);

// Same, from YAML text (path is used in messages only).
Experiment parse_experiment(const std::string& yaml_text, const std::string& path,
                            const std::vector<std::string>& overrides);

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
