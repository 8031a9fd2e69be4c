// The bytes of a small data input (tokenizer.json, manifest.json, a text to encode), read whole.
#pragma once

#include <string>

namespace trainrun {

// Throws DataError naming the path and the fix when it is not a regular file (a FIFO would
// block the open until some writer came, a device could be endless) or cannot be read.
std::string read_whole_file(const std::string& path);

}  // namespace trainrun
