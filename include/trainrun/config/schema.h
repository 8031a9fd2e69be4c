// The config keys as data, for the CLI (listing keys, printing one value). The schema itself
// lives in src/config/schema.cpp; this is a read-only view of it.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun {

struct ConfigKey {
  std::string key;            // "model.n_layer"
  std::string type;           // int, uint, double, bool, string, enum, list<int>, ...
  std::string default_value;  // as YAML flow text
  std::string allowed;        // ">= 1", "[0, 1)", "gpt, mlp"; empty when anything goes
  std::string description;
  bool resumable;  // may change with --set on resume
};

// Every key, in schema order.
std::vector<ConfigKey> config_keys();

// One key's value in `exp` as YAML flow text ("4", "[0.9, 0.95]"). Throws ConfigError with a
// "did you mean" for an unknown key.
std::string config_value(const Experiment& exp, const std::string& key);

}  // namespace trainrun
