// The checkpoints of one run: RUN_DIR/checkpoints/step-NNNNNNN.h5, newest first, and the
// newest one that still verifies (intact and usable).
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "checkpoint_dir.h"
#include "trainrun/checkpoint.h"
#include "trainrun/h5_handle.h"

namespace trainrun {
namespace fs = std::filesystem;

namespace {

// "step-0000123.h5" -> 123; anything else (temp files, other names, "step-123.h5", which
// checkpoint_path never writes) -> -1: only names trainrun writes are its checkpoints.
int64_t step_of(const std::string& name) {
  constexpr std::string_view prefix = "step-", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return -1;
  const char* b = name.data() + prefix.size();
  const char* e = name.data() + name.size() - suffix.size();
  int64_t step = -1;
  auto [p, ec] = std::from_chars(b, e, step);
  if (ec != std::errc() || p != e || step < 0) return -1;
  return name == fmt::format("step-{:07d}.h5", step) ? step : -1;
}

bool pid_alive(long pid) {
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

bool is_trainrun_checkpoint(const std::string& path) {
  h5::quiet();
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  const bool ours = H5Aexists(f, "format_version") > 0 && H5Aexists(f, "step") > 0;
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  return ours;
}

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step-{:07d}.h5", step)).string();
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

int remove_stale_temp_files(const std::string& run_dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.rfind(".tmp-");
    // Only a checkpoint write's own temporary (step-NNNNNNN.h5.tmp-PID) is trainrun's to remove.
    if (at == std::string::npos || step_of(name.substr(0, at)) < 0) continue;
    long pid = 0;
    const char* b = name.data() + at + 5;
    const char* e = name.data() + name.size();
    auto [p, perr] = std::from_chars(b, e, pid);
    // A live pid may be a writer on this host right now: leave its file alone.
    if (perr != std::errc() || p != e || pid_alive(pid)) continue;
    std::error_code rec;
    if (fs::remove(entry.path(), rec)) {
      spdlog::info("removed {} left by an interrupted checkpoint write", entry.path().string());
      ++removed;
    }
  }
  return removed;
}

std::optional<std::string> latest_good_checkpoint(const std::string& run_dir,
                                                  std::vector<std::string>* warnings) {
  remove_stale_temp_files(run_dir);
  std::vector<std::pair<std::string, Verdict>> bad;
  std::optional<std::string> good;
  for (const std::string& path : list_checkpoints(run_dir)) {
    Verdict v = verify_checkpoint(path);
    if (v.ok) {
      good = path;
      if (warnings && !v.note.empty())
        warnings->push_back(fmt::format("checkpoint {}: {}", path, v.note));
      break;
    }
    bad.emplace_back(path, std::move(v));
  }
  if (warnings) {
    for (const auto& [path, v] : bad)
      warnings->push_back(
          good ? fmt::format("checkpoint {} is {} ({}); falling back to {}", path, v.problem(),
                             v.reason, *good)
               : fmt::format("checkpoint {} is {} ({}); no older checkpoint is left to fall "
                             "back to",
                             path, v.problem(), v.reason));
  }
  return good;
}

}  // namespace trainrun
