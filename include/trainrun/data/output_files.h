// The rule for every file trainrun writes outside a run directory (`data prepare`, `data tokenizer
// train`, `export`, `report --out`): an output that is also an input is always refused (the input
// would be lost), an output that already exists is replaced only with --force, and nothing is
// deleted that trainrun did not write.
#pragma once

#include <string>
#include <vector>

namespace trainrun {

// Throws ConfigError (exit 2) naming the file and the fix when one of `outputs` is one of
// `inputs` (the same file, by any path), or exists while `force` is false. `command` names the
// command in the message ("data prepare").
void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                   bool force, const char* command);

}  // namespace trainrun
