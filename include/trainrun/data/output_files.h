// The rule for every file trainrun writes outside a run directory (`data prepare`, `data tokenizer
// train`, `export`, `report --out`): an output that is also an input is always refused (the input
// would be lost), an output that exists and is not a regular file (a device, a FIFO, a
// directory, a symbolic link) is always refused, an output that is a regular file is replaced
// only with --force, and nothing is deleted that trainrun did not write. A write that fails
// (the disk is full) ends with exit 74, as a checkpoint's does.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/errors.h"

namespace trainrun {

// Throws ConfigError (exit 2) naming the file and the fix when one of `outputs` is one of
// `inputs` (the same file, by any path), is there and is not a regular file (a symbolic link
// included: it is neither followed nor replaced), or exists while `force` is false. `command`
// names the command in the message ("data prepare").
void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                   bool force, const char* command);

// Writing `path` failed with errno `err`: Error(kExitWrite) naming the file and the system's
// reason; ENOSPC (or a quota) says the disk is full and what to do.
Error write_error(const std::string& path, int err);

}  // namespace trainrun
