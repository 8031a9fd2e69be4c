// Internal to src/obs: one metrics row <-> one line of JSON. Our rows are flat objects of
// numbers and strings, so a small exact formatter and parser beat a JSON library dependency.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainrun/metrics.h"

namespace trainrun {

// {"kind":KIND,<fields in order>}; doubles in the shortest form that reads back to the same
// value, NaN and infinities as null.
// s as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

std::string format_metrics_line(const std::string& kind, const MetricRow& row);

// Parses one line back (null -> NaN, true/false -> 1/0); nullopt when the line is not a flat
// JSON object (e.g. a line torn by a crash).
std::optional<MetricRow> parse_metrics_line(std::string_view line);

}  // namespace trainrun
