// Failure records on disk: one metrics-style JSON line per file ({"kind":"failure",...}).
#include "trainrun/runtime/failure_record.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "failure_record_json.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/obs/metrics.h"

namespace fs = std::filesystem;

namespace trainrun {
namespace {

constexpr const char* kPrefix = "failure-rank-";
constexpr const char* kSuffix = ".json";

// The rank a file name belongs to, or -1 when it is not a record's name.
int rank_of(const std::string& name) {
  int rank = -1, used = 0;
  const std::string pattern = std::string(kPrefix) + "%d" + kSuffix + "%n";
  if (std::sscanf(name.c_str(), pattern.c_str(), &rank, &used) != 1 || used == 0 ||
      static_cast<size_t>(used) != name.size() || rank < 0)
    return -1;
  return rank;
}

// Phase, step and time last: the fatal-signal path appends them itself (failure_record_json.h).
MetricRow to_row(const FailureRecord& r) {
  return {{"rank", double(r.rank)},
          {"host", r.host},
          {"pid", double(r.pid)},
          {"exit_code", double(r.exit_code)},
          {"cause", r.cause},
          {"message", r.message},
          {"culprit_rank", double(r.culprit_rank)},
          {"culprit_host", r.culprit_host},
          {"phase", r.phase},
          {"step", double(r.step)},
          {"time", r.time}};
}

std::optional<FailureRecord> from_row(const MetricRow& row) {
  std::map<std::string, MetricValue> f(row.begin(), row.end());
  auto num = [&](const char* k) -> std::optional<double> {
    auto it = f.find(k);
    if (it == f.end() || !std::holds_alternative<double>(it->second)) return std::nullopt;
    return std::get<double>(it->second);
  };
  auto str = [&](const char* k) {
    auto it = f.find(k);
    return it != f.end() && std::holds_alternative<std::string>(it->second)
               ? std::get<std::string>(it->second)
               : std::string();
  };
  const auto rank = num("rank"), code = num("exit_code");
  if (str("kind") != "failure" || !rank || !code || !std::isfinite(*rank) || !std::isfinite(*code))
    return std::nullopt;
  FailureRecord r;
  r.rank = static_cast<int>(*rank);
  r.exit_code = static_cast<int>(*code);
  r.host = str("host");
  r.pid = static_cast<int64_t>(num("pid").value_or(0));
  r.cause = str("cause");
  r.message = str("message");
  r.culprit_rank = static_cast<int>(num("culprit_rank").value_or(-1));
  if (r.culprit_rank < 0) r.culprit_rank = r.rank;
  r.culprit_host = str("culprit_host");
  if (r.culprit_rank == r.rank && r.culprit_host.empty()) r.culprit_host = r.host;
  r.phase = str("phase");
  r.step = static_cast<int64_t>(num("step").value_or(-1));
  r.time = num("time").value_or(0);
  return r;
}

}  // namespace

std::string failure_record_line(const FailureRecord& record) {
  return format_metrics_line("failure", to_row(record));
}

std::string failure_record_path(const std::string& run_dir, int rank) {
  return (fs::path(run_dir) / "logs" / fmt::format("{}{}{}", kPrefix, rank, kSuffix)).string();
}

bool write_failure_record(const std::string& run_dir, const FailureRecord& record) {
  const fs::path final_path = failure_record_path(run_dir, record.rank);
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  try {
    replace_file(final_path.string(), failure_record_line(record) + "\n");
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::vector<FailureRecord> read_failure_records(const std::string& run_dir) {
  std::map<int, FailureRecord> by_rank;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "logs", ec)) {
    const int rank = rank_of(entry.path().filename().string());
    if (rank < 0) continue;
    // One line as write_failure_record makes it; anything else there (a FIFO would block the
    // supervisor) is not a record.
    std::string line;
    try {
      static constexpr FileRule kRule{64 * 1024, kExitRunDir, "remove it"};
      line = read_regular_file(entry.path().string(), kRule).value_or("");
    } catch (const Error&) {
      continue;
    }
    line = line.substr(0, line.find('\n'));
    auto row = parse_metrics_line(line);
    if (!row) continue;
    if (auto r = from_row(*row); r && r->rank == rank) by_rank[rank] = *r;
  }
  std::vector<FailureRecord> out;
  for (auto& [rank, r] : by_rank) out.push_back(std::move(r));
  return out;
}

void clear_failure_records(const std::string& run_dir) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "logs", ec)) {
    const std::string name = entry.path().filename().string();
    const bool temporary = name.rfind(std::string(".") + kPrefix, 0) == 0;
    if (rank_of(name) >= 0 || temporary) doomed.push_back(entry.path());
  }
  for (const auto& p : doomed) fs::remove(p, ec);
}

}  // namespace trainrun
