// Logging: every rank logs to RUN_DIR/logs/rank-N.log; only rank 0 also prints to the console,
// in colour on a terminal and plain otherwise (colour codes would leak into mpirun's output).
#pragma once

#include <string>

namespace trainrun {

void setup_logging(const std::string& run_dir, int rank, bool console);
bool stdout_is_terminal();

}  // namespace trainrun
