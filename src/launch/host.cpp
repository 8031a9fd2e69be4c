// Programs the launcher starts: mpirun on PATH, and this program itself for the ranks.
#include "host.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "trainrun/launch/launch.h"

namespace trainrun {

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  const std::string p = path;
  size_t pos = 0;
  for (;;) {
    const size_t colon = p.find(':', pos);
    const std::string dir =
        p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) return "";
    pos = colon + 1;
  }
}

std::string self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("trainrun") : p.string();
}

}  // namespace trainrun
