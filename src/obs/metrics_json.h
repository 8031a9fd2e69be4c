// Internal to src/obs: one metrics row <-> one line of JSON. Our rows are flat objects of
// numbers and strings, so a small exact formatter and parser beat a JSON library dependency.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainrun/metrics.h"

namespace trainrun {

// format_metrics_line and parse_metrics_line are public (trainrun/metrics.h). The parser maps
// null -> NaN and true/false -> 1/0, and refuses a line torn by a crash.

}  // namespace trainrun
