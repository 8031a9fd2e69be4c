// One field's value inside an Experiment: typed from YAML, rendered back, checked against the
// range or allowed values its schema row gives.
#pragma once

#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "schema.h"

namespace trainrun::config {

// Where a value came from, to prefix messages: a position in a config file or a --set argument.
struct Source {
  std::string file;                           // the config file; empty for a --set argument
  std::string arg;                            // the --set argument
  std::string at(const YAML::Mark& m) const;  // "file.yaml:3:5" or "--set k=v"
};

// Sets the field from `node`, found at `mark` (the key's mark for an empty value, whose own mark
// points past it). Throws ConfigError for a wrong type or a value out of range.
void decode(const Field& f, const YAML::Node& node, const YAML::Mark& mark, const Source& src,
            Experiment& exp);

// "must be >= 1", "must be in [0, 1)": the phrase for a field's allowed_text().
std::string must_be(const std::string& allowed);

// The value as YAML flow text: 4, 0.001, true, gpt, [64, 64]. Strings are not quoted unless
// `quote_strings` (then "" shows an empty one).
std::string render(const Field& f, const Experiment& exp, bool quote_strings = false);

// Writes the value so that it parses back to the same value.
void emit(const Field& f, const Experiment& exp, YAML::Emitter& out);

// Why the current value breaks the field's own rule (range, allowed values, length), if it does.
std::optional<std::string> check_value(const Field& f, const Experiment& exp);

// A double as the shortest text that reads back the same, always with a '.' or exponent.
std::string format_double(double v);

// What a node holds, for "found ..." in messages: "string 'four'", "a list", "integer 5".
std::string describe(const YAML::Node& node);

}  // namespace trainrun::config
