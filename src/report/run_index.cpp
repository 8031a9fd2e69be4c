#include "trainrun/report/run_index.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "report_summary.h"
#include "text_table.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/experiment.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/obs/provenance.h"
#include "trainrun/report/compare.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

// Whether the run's owner holds RUN_DIR/.trainrun.lock (launch/run_dir.h).
bool locked(const fs::path& dir) {
  const int fd = ::open((dir / ".trainrun.lock").c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

// A run's status from a sweep point's: nullopt for a point whose sweep process is gone while it
// ran (what the run says decides).
std::optional<RunStatus> of_point(PointStatus status, int exit_code) {
  switch (status) {
    case PointStatus::done:
      return RunStatus{RunStatus::done, 0};
    case PointStatus::failed:
      return RunStatus{RunStatus::failed, exit_code};
    case PointStatus::preempted:
      return RunStatus{RunStatus::preempted, exit_code};
    case PointStatus::pending:
      return RunStatus{RunStatus::pending, -1};
    case PointStatus::running:
      break;
  }
  return std::nullopt;
}

struct Listed {
  std::string name, path, sweep;
  RunStatus status;
  double steps = NAN, best_val = NAN;
  std::string updated;  // metrics.jsonl's modification time, local, "" without one
};

std::string mtime_text(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return "";
  std::tm tm{};
  localtime_r(&st.st_mtime, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

Listed listed(const fs::path& dir, const std::string& sweep, const SweepPoint* point) {
  Listed l;
  l.name = dir.filename().string();
  l.path = dir.string();
  l.sweep = sweep;
  const auto fig = run_figures(l.path);  // kCompareMetrics: steps, train loss, best val, ...
  l.steps = fig[0];
  l.best_val = fig[2];
  int64_t train_steps = -1;
  if (fs::exists(dir / "config.yaml")) train_steps = report::read_config(l.path).steps;
  l.status = run_status(l.path, point, std::isnan(l.steps) ? -1 : int64_t(l.steps), train_steps);
  l.updated = mtime_text(dir / "metrics.jsonl");
  return l;
}

std::string num(double v, const char* f) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : "-";
}

}  // namespace

bool is_run_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "config.yaml", ec) ||
         fs::exists(fs::path(dir) / "metrics.jsonl", ec);
}

RunStatus run_status(const std::string& run_dir, const SweepPoint* point, int64_t steps_done,
                     int64_t train_steps) {
  if (locked(run_dir)) return {RunStatus::running, -1};
  // The run's own record first: a sweep's manifest says only what that sweep process saw (a
  // point a Slurm array task trained is still pending there).
  const auto p = read_provenance(run_dir);
  const ProvenanceAttempt* last = p && !p->attempts.empty() ? &p->attempts.back() : nullptr;
  // status_of_exit is done, failed or preempted: always a status here.
  if (last && last->exit_code) return *of_point(status_of_exit(*last->exit_code), *last->exit_code);
  if (point)
    if (const auto s = of_point(point->status, point->exit_code)) return *s;
  if (last) return {RunStatus::stopped, -1};  // its owner was killed
  if (steps_done < 0) return {RunStatus::empty, -1};
  if (train_steps > 0 && steps_done >= train_steps) return {RunStatus::done, 0};
  return {RunStatus::stopped, -1};
}

std::string status_text(const RunStatus& s, const char* running) {
  switch (s.kind) {
    case RunStatus::running:
      return running;
    case RunStatus::done:
      return "done";
    case RunStatus::failed:
      return fmt::format("failed ({})", s.exit_code);
    case RunStatus::preempted:
      return "preempted";
    case RunStatus::pending:
      return "pending";
    case RunStatus::stopped:
      return "stopped";
    case RunStatus::empty:
      break;
  }
  return "empty";
}

std::string list_runs(const std::string& dir, bool json) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw ConfigError(
        fmt::format("runs: {} is not a directory; name the directory that holds "
                    "your runs (default runs/)",
                    dir));
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) entries.push_back(it->path());
  std::sort(entries.begin(), entries.end());
  std::vector<Listed> rows;
  for (const fs::path& e : entries) {
    if (is_sweep_dir(e.string())) {
      const SweepManifest m = read_sweep_manifest(e.string());
      for (const SweepPoint& p : m.points)
        rows.push_back(listed(e / p.name, e.filename().string(), &p));
    } else if (is_run_dir(e.string())) {
      rows.push_back(listed(e, "", nullptr));
    }
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Listed& r : rows)
      out.push_back(
          {{"name", r.name},
           {"path", r.path},
           {"status", status_text(r.status)},
           {"steps", std::isfinite(r.steps) ? nlohmann::json(int64_t(r.steps)) : nullptr},
           {"best_val_loss", std::isfinite(r.best_val) ? nlohmann::json(r.best_val) : nullptr},
           {"updated", r.updated},
           {"sweep", r.sweep}});
    return out.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> cells{
      {"run", "status", "steps", "best val", "updated", "sweep"}};
  for (const Listed& r : rows)
    cells.push_back({r.name, status_text(r.status), num(r.steps, "{:.0f}"),
                     num(r.best_val, "{:.4f}"), r.updated.empty() ? "-" : r.updated,
                     r.sweep.empty() ? "-" : r.sweep});
  std::string out = report::text_table(cells);
  if (rows.empty()) out += fmt::format("(no runs in {})\n", dir);
  return out;
}

}  // namespace trainrun
