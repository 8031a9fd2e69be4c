// What this binary is: its release and the source commit it was built from, embedded at build
// time (`git describe --always --dirty` of the source tree; "unknown" outside a git checkout),
// as --version, checkpoints and a run's provenance record report them.
#pragma once

#include <string>
#include <string_view>

namespace trainrun {

std::string_view trainrun_release();  // "0.1.0" (meson.build's project version)
std::string_view source_commit();     // "3f2a9c1b7d4e", "3f2a9c1b7d4e-dirty" or "unknown"
// "0.1.0+3f2a9c1b7d4e": the release with the commit as semantic-versioning build metadata; what
// every checkpoint records as its trainrun_version.
std::string trainrun_version();

}  // namespace trainrun
