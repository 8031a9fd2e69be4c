// Internal to src/plan: where `trainrun report` writes (RUN_DIR/report.png, RUN_DIR/report.html,
// or --out). Each path is checked before any work, so that an output that cannot be written is
// a clear error naming it and the fix, not a failure after the drawing; the file itself is
// written by replace_file (core/no_follow.h): a new file renamed over the name, so a link there
// is replaced and never followed, and a viewer never sees half a file.
#pragma once

#include <string>

namespace trainrun::report {

// `out`, or RUN_DIR/`name` when `out` is empty. Throws ConfigError (exit 2) when the folder it
// goes in does not exist, and Error(kExitWrite) (exit 74, as for every output trainrun cannot
// write) when that folder cannot be written: `fix` ends that message.
std::string output_path(const std::string& run_dir, const std::string& out, const char* name,
                        const std::string& fix);

}  // namespace trainrun::report
