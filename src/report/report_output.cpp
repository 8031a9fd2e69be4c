// output_path (report_output.h).
#include "report_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainrun/core/errors.h"

namespace fs = std::filesystem;

namespace trainrun::report {

std::string output_path(const std::string& run_dir, const std::string& out, const char* name,
                        const std::string& fix) {
  const std::string path = out.empty() ? (fs::path(run_dir) / name).string() : out;
  std::error_code ec;
  const fs::path dir = fs::absolute(path, ec).parent_path();
  if (ec || !fs::is_directory(dir, ec))
    throw ConfigError(
        fmt::format("report: --out {}: directory {} does not exist", path, dir.string()));
  // access(2) answers as the write would: a read-only mount (EROFS), an immutable folder
  // (EPERM) and missing permissions (EACCES) all fail here, before the report is drawn.
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(kExitWrite, fmt::format("report: cannot write {}: the directory {} is not "
                                        "writable ({}); {}",
                                        path, dir.string(), std::strerror(errno), fix));
  return path;
}

}  // namespace trainrun::report
