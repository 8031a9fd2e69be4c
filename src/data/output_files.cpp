// check_outputs (trainrun/data/output_files.h): the outputs of the data commands against their
// inputs and against what is already on disk, before any work is done.
#include "trainrun/data/output_files.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "trainrun/core/errors.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

// The same file by any path: one inode when both exist, else the same normalised absolute path.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path pb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return pa == pb;
}

}  // namespace

void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                   bool force, const char* command) {
  for (const std::string& out : outputs) {
    for (const std::string& in : inputs)
      if (same_file(in, out))
        throw ConfigError(fmt::format(
            "{}: the output {} is also an input ({}): writing it would destroy the input; "
            "choose another output path",
            command, out, in));
    std::error_code ec;
    if (!force && fs::exists(out, ec))
      throw ConfigError(
          fmt::format("{}: {} exists; pass --force to replace it, or choose another output path",
                      command, out));
  }
}

}  // namespace trainrun
