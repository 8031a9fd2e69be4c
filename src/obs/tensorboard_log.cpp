// TensorBoardLog: metrics rows to TensorBoard event files, one file per writer, cut back on
// resume so that no step appears twice across the files of a run.
#include "trainrun/obs/tensorboard.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/obs/tb_events.h"

namespace trainrun {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "events.out.tfevents.";

// A file that could not be written (a full disk, an I/O error): exit 74, as for the metrics.
Error tb_error(const std::string& file, const std::string& why) {
  return Error(kExitWrite, fmt::format("TensorBoard file {}: {}", file, why));
}

double wall_time() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h = buf;
  for (char& c : h)
    if (c == '/') c = '_';
  return h;
}

// The writer number of an event file: the part after its last dot (0 when that is no number).
int writer_number(const std::string& name) {
  const std::string_view last = std::string_view(name).substr(name.rfind('.') + 1);
  int n = 0;
  const auto [end, ec] = std::from_chars(last.data(), last.data() + last.size(), n);
  return ec == std::errc() && end == last.data() + last.size() ? n : 0;
}

// An event file of an earlier attempt, read back to cut it to the checkpoint's step: a regular
// file (a FIFO or a device in tb/ would block or never end), as large as metrics.jsonl may be.
std::string slurp(const fs::path& file) {
  static constexpr FileRule kRule{4ull << 30, kExitRunDir,
                                  "move it out of the run directory's tb/ folder and run again"};
  return read_regular_file(file.string(), kRule).value_or("");
}

// Through a temporary file and a rename, so a crash leaves the old file or the new, never half.
// The temporary name lacks "tfevents": a TensorBoard watching the directory never reads it.
void rewrite_durably(const fs::path& file, std::string_view bytes) {
  const fs::path tmp = file.parent_path() / fmt::format(".rewrite-{}", ::getpid());
  try {
    write_new_file(tmp.string(), std::string(bytes), true);
    rename_durably(tmp.string(), file.string());
  } catch (const Error& e) {
    ::unlink(tmp.c_str());
    throw tb_error(file.string(), std::string("cannot rewrite it: ") + e.what());
  }
}

// Cuts one file back to its records with step <= keep (and drops a torn tail). Returns whether
// data (more than the header) is left; a file left with none is removed.
bool cut_back(const fs::path& file, int64_t keep) {
  const std::string bytes = slurp(file);
  const tb::RecordScan scan = tb::scan_tfrecords(bytes);
  std::string kept;
  size_t kept_records = 0;
  bool data = false;
  for (std::string_view r : scan.records) {
    const auto info = tb::event_info(r);
    if (!info || info->step > keep) continue;
    kept += tb::tfrecord(r);
    ++kept_records;
    data = data || !info->file_version;
  }
  std::error_code ec;
  if (!data) {
    fs::remove(file, ec);
  } else if (kept_records != scan.records.size() || scan.valid_bytes != bytes.size()) {
    rewrite_durably(file, kept);
  }
  return data;
}

std::optional<double> number(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const double* d = std::get_if<double>(&v)) return *d;
      return std::nullopt;
    }
  return std::nullopt;
}

std::string text_of(const MetricValue& v) {
  if (const double* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  return std::get<std::string>(v);
}

// "events/<event>"; a straggler event per rank ("events/straggler/rank_3"), since several ranks
// can be named at one step and TensorBoard keeps one value per tag and step.
std::string event_tag(const MetricRow& row) {
  std::string name = "event";
  for (const auto& [k, v] : row)
    if (k == "event") name = text_of(v);
  const auto rank = number(row, "rank");
  if (enum_from_name<MetricEvent>(name) == MetricEvent::straggler && rank)
    return fmt::format("events/straggler/rank_{}", *rank);
  return "events/" + name;
}

// "cause: ..., attempt: 2": every field but the step and the event's name.
std::string event_text(const MetricRow& row) {
  std::string s;
  for (const auto& [k, v] : row) {
    if (k == "step" || k == "event") continue;
    s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", k, text_of(v));
  }
  return s.empty() ? "(no details)" : s;
}

// Indented four spaces: a Markdown code block, so TensorBoard shows the YAML as written.
std::string as_code_block(const std::string& text) {
  std::string out, line;
  std::istringstream in(text);
  while (std::getline(in, line)) out += "    " + line + "\n";
  return out;
}

}  // namespace

TensorBoardLog::TensorBoardLog(const std::string& dir, int64_t keep_through_step,
                               std::string config_text)
    : resumed_at_(keep_through_step), config_text_(std::move(config_text)) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw tb_error(dir, ec.message());
  std::vector<fs::path> earlier;  // listed first: the loop below removes and replaces files
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind(kPrefix, 0) == 0) earlier.push_back(entry.path());
  int last = 0;
  bool earlier_data = false;
  for (const fs::path& file : earlier) {
    if (keep_through_step < 0) {
      fs::remove(file, ec);
      continue;
    }
    last = std::max(last, writer_number(file.filename().string()));
    if (cut_back(file, keep_through_step)) earlier_data = true;
  }
  if (earlier_data) config_text_.clear();  // the run's first writer wrote it
  path_ =
      (fs::path(dir) / fmt::format("{}{}.{}.{}", kPrefix, static_cast<int64_t>(std::time(nullptr)),
                                   host_name(), last + 1))
          .string();
}

TensorBoardLog::~TensorBoardLog() {
  if (file_) std::fclose(file_);
}

void TensorBoardLog::write(const std::string& event) {
  std::string bytes;
  if (!file_) {
    file_ = fopen_no_follow(path_, "wb");
    if (!file_) throw tb_error(path_, std::strerror(errno));
    const double now = wall_time();
    bytes = tb::tfrecord(tb::file_version_event(now));
    if (resumed_at_ >= 0) bytes += tb::tfrecord(tb::session_start_event(now, resumed_at_ + 1));
    if (!config_text_.empty())
      bytes += tb::tfrecord(tb::text_event(now, 0, "config", as_code_block(config_text_)));
    config_text_.clear();
  }
  bytes += tb::tfrecord(event);
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size())
    throw tb_error(path_, std::strerror(errno));
}

void TensorBoardLog::append(const std::string& kind, const MetricRow& row) {
  const auto step = static_cast<int64_t>(std::llround(number(row, "step").value_or(0)));
  if (kind == "event") {
    // Events are occurrences, not a series: each is written, also at a step already logged.
    write(tb::text_event(wall_time(), step, event_tag(row), event_text(row)));
    return;
  }
  int64_t& last = last_step_.try_emplace(kind, resumed_at_).first->second;
  if (step <= last) return;  // in an earlier file already (or earlier in this one)
  last = step;
  std::vector<tb::Scalar> values;
  for (const auto& [k, v] : row)
    if (const double* d = std::get_if<double>(&v); d && k != "step")
      values.push_back({kind + "/" + k, static_cast<float>(*d)});
  if (!values.empty()) write(tb::scalars_event(wall_time(), step, values));
}

void TensorBoardLog::flush() {
  if (file_ && std::fflush(file_) != 0) throw tb_error(path_, std::strerror(errno));
}

}  // namespace trainrun
