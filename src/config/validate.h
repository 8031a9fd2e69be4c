// Every rule a config must satisfy: each field's own range (from the schema) and the rules that
// tie fields together. Checked up front so a run never fails late on a bad config.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun::config {

struct Violation {
  std::vector<std::string_view> keys;  // the keys involved, the one to point at first
  std::string message;
};

// All rules broken by `exp` when it runs on `world` ranks, in schema order then rule order.
std::vector<Violation> violations(const Experiment& exp, int world);

// One sentence per rule across keys, for docs/config.md.
std::vector<std::string_view> cross_field_rules();

}  // namespace trainrun::config
