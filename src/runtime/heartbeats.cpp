// The heartbeat files' names, in one place for the ranks that write them and the launcher that
// waits for the first.
#include "trainrun/runtime/heartbeats.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;

namespace trainrun {
namespace {

constexpr const char* kPrefix = "heartbeat-rank-";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

}  // namespace

std::string heartbeat_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / "logs" / fmt::format("{}{}", kPrefix, rank)).string();
}

bool any_heartbeat(const std::string& run_dir) {
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(run_dir) / "logs", ec), end; !ec && it != end;
       it.increment(ec))
    if (starts_with(it->path().filename().string(), kPrefix)) return true;
  return false;
}

void clear_heartbeats(const std::string& run_dir) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(fs::path(run_dir) / "logs", ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (starts_with(name, kPrefix) || starts_with(name, std::string(".") + kPrefix))
      doomed.push_back(it->path());
  }
  for (const fs::path& p : doomed) fs::remove(p, ec);
}

}  // namespace trainrun
