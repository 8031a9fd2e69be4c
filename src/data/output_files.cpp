// check_outputs and write_error (trainrun/data/output_files.h): the outputs of the data commands
// against their inputs and against what is already on disk, before any work is done, and the
// one error a failed write of them ends with.
#include "trainrun/data/output_files.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "trainrun/core/regular_file.h"

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
    // lstat: what is at the name itself. Every writer replaces its output by a rename, which
    // would turn a device node (as root, /dev/null) or a FIFO into a regular file, and a writer
    // that opens the name (gnuplot for `report --out`) would write through a link: so whatever
    // is there and is not a regular file is refused, with or without --force. A link is refused
    // rather than replaced: the user made it, and may have meant its target.
    struct stat st {};
    if (::lstat(out.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path target = fs::read_symlink(out, ec);
      throw ConfigError(fmt::format(
          "{}: the output {} is a symbolic link{}: trainrun neither writes through a link nor "
          "replaces it; remove the link, or give the path you mean as the output",
          command, out, ec ? "" : fmt::format(" (to {})", target.string())));
    }
    if (!S_ISREG(st.st_mode))
      throw ConfigError(fmt::format(
          "{}: the output {} is {}, not a regular file: writing it would replace it (--force "
          "does not); choose another output path",
          command, out, file_kind(st.st_mode)));
    if (!force)
      throw ConfigError(
          fmt::format("{}: {} exists; pass --force to replace it, or choose another output path",
                      command, out));
  }
}

Error write_error(const std::string& path, int err) {
  const bool full = err == ENOSPC || err == EDQUOT;
  return Error(kExitWrite,
               fmt::format("cannot write {} ({}){}", path, std::strerror(err),
                           full ? ": the disk is full; free space on it, or choose an output "
                                  "on another disk, and run the command again"
                                : "; check free space and permissions"));
}

}  // namespace trainrun
