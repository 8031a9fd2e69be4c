// Internal to src/launch: a failure record as the one JSON line its file holds.
#pragma once

#include <string>

#include "trainrun/runtime/failure_record.h"

namespace trainrun {

// {"kind":"failure",...}, without a newline. The last three fields are always "phase", "step"
// and "time", in that order: the fatal-signal path renders everything before them ahead of
// time and appends those three itself, since it may not allocate.
std::string failure_record_line(const FailureRecord& record);

}  // namespace trainrun
