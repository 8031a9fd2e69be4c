#include "trainrun/cli.h"

namespace trainrun {
int cli_main(int, char**) { return 0; }
}  // namespace trainrun
