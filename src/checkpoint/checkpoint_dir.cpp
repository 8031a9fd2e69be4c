// The checkpoints of one run: RUN_DIR/checkpoints/step-NNNNNNN folders (and older
// step-NNNNNNN.h5 files), once committed, newest first, and the newest one that still verifies
// (intact and usable).
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>

#include "checkpoint_dir.h"
#include "checkpoint_folder.h"
#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/checkpoint/h5_handle.h"

namespace trainrun {
namespace fs = std::filesystem;

namespace {

// "step-0000123.h5" -> 123 (with `suffix` ".h5"; a sharded folder has none); anything else
// (temp files, other names, "step-123.h5", which checkpoint_path never writes) -> -1: only names
// trainrun writes are its checkpoints.
int64_t step_of(const std::string& name, std::string_view suffix = ".h5") {
  constexpr std::string_view prefix = "step-";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return -1;
  const char* b = name.data() + prefix.size();
  const char* e = name.data() + name.size() - suffix.size();
  int64_t step = -1;
  auto [p, ec] = std::from_chars(b, e, step);
  if (ec != std::errc() || p != e || step < 0) return -1;
  return name == fmt::format("step-{:07d}{}", step, suffix) ? step : -1;
}

// Sharded folders hold their own temporaries: rank-RRRRR-of-WWWWW.h5.tmp-PID, MANIFEST.tmp-PID.
bool is_shard_temp_target(const std::string& name) {
  return name == kManifestName || (name.starts_with("rank-") && name.ends_with(".h5"));
}

// True when every entry of the folder is a name trainrun writes there (or its temporary).
bool holds_only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  bool ours = true;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    const std::string name = f.path().filename().string();
    const size_t tmp = name.rfind(".tmp-");
    ours = ours && is_shard_temp_target(tmp == std::string::npos ? name : name.substr(0, tmp));
  }
  return ours && !ec;
}

bool pid_alive(long pid) {
  return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

bool is_trainrun_checkpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return has_manifest(path) && holds_only_checkpoint_files(path);
  if (!fs::is_regular_file(path, ec)) return false;  // a FIFO would block the open
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

std::string single_file_checkpoint_path(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step-{:07d}.h5", step)).string();
}

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step-{:07d}", step)).string();
}

bool is_run_directory(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  const std::string name = fs::path(path).lexically_normal().filename().string();
  return !has_manifest(path) &&
         step_of(name.empty() ? fs::path(path).lexically_normal().parent_path().filename().string()
                              : name,
                 "") < 0;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = entry.path().filename().string();
    if (int64_t step = step_of(name); step >= 0 && entry.is_regular_file(ec))
      found.emplace_back(step, entry.path().string());
    // A folder without a manifest is a save that never finished: not a checkpoint.
    else if (int64_t fstep = step_of(name, "");
             fstep >= 0 && entry.is_directory(ec) && has_manifest(entry.path().string()))
      found.emplace_back(fstep, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(std::move(f.second));
  return paths;
}

namespace {

// `top`: the checkpoints folder, whose step folders are entered only when `enter` (a rank on
// another host may be writing into one, and its pid means nothing here).
int remove_stale_temp_files_in(const fs::path& dir, bool sharded, bool enter = false) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (!sharded && step_of(name, "") >= 0 && entry.is_directory(ec)) {
      if (enter) removed += remove_stale_temp_files_in(entry.path(), true);
      continue;
    }
    size_t at = name.rfind(".tmp-");
    // Only a checkpoint write's own temporary (step-NNNNNNN.h5.tmp-PID) is trainrun's to remove.
    if (at == std::string::npos) continue;
    if (sharded ? !is_shard_temp_target(name.substr(0, at)) : step_of(name.substr(0, at)) < 0)
      continue;
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

}  // namespace

std::vector<std::pair<int64_t, std::string>> unfinished_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const int64_t step = step_of(entry.path().filename().string(), "");
    if (step < 0 || !entry.is_directory(ec) || has_manifest(entry.path().string())) continue;
    // Only a folder holding nothing but rank files and their temporaries is trainrun's: pruning
    // never deletes a file trainrun did not write.
    if (holds_only_checkpoint_files(entry.path())) found.emplace_back(step, entry.path().string());
  }
  return found;
}

bool remove_checkpoint(const std::string& path, std::error_code& ec) {
  if (!fs::is_directory(path, ec)) return fs::remove(path, ec);
  // Only the names trainrun writes into a checkpoint's folder; anything else (a user's notes)
  // stays, and so does the folder then.
  for (const auto& f : fs::directory_iterator(path, ec)) {
    const std::string name = f.path().filename().string();
    const size_t tmp = name.rfind(".tmp-");
    if (is_shard_temp_target(tmp == std::string::npos ? name : name.substr(0, tmp)))
      fs::remove(f.path(), ec);
    if (ec) return false;
  }
  if (ec || !fs::is_empty(path, ec)) return false;
  return fs::remove(path, ec);
}

int64_t step_of_checkpoint(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const int64_t step = step_of(name);
  return step >= 0 ? step : step_of(name, "");
}

int remove_stale_temp_files(const std::string& run_dir, bool step_folders) {
  return remove_stale_temp_files_in(fs::path(run_dir) / "checkpoints", false, step_folders);
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
               : fmt::format("checkpoint {} is {} ({}); none of the {} checkpoint(s) of the run "
                             "verifies, so there is nothing to fall back to",
                             path, v.problem(), v.reason, bad.size()));
  }
  return good;
}

}  // namespace trainrun
