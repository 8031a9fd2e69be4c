#pragma once

namespace trainrun {
// The whole command line; returns the process exit code (see errors.h).
int cli_main(int argc, char** argv);
}  // namespace trainrun
