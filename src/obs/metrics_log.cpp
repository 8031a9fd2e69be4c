// MetricsLog: the same rows to RUN_DIR/metrics.jsonl (every field), RUN_DIR/metrics.h5 (one
// extendable float64 column per numeric field, NaN where a row lacks it) and, unless the run's
// config turns it off, TensorBoard event files in RUN_DIR/tb; all truncated to the checkpoint's
// step on resume.
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "trainrun/checkpoint/h5_handle.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/experiment.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/obs/tensorboard.h"

namespace trainrun {
namespace {

using namespace h5;
namespace fs = std::filesystem;

constexpr hsize_t kChunkRows = 1024;
// Rows are buffered and written to HDF5 in batches (and at every flush()).
constexpr size_t kMaxPendingRows = 1024;

// metrics.jsonl as it is read back (report, the supervisor, a resume cutting it to its
// checkpoint): a regular file of at most 4 GiB, its lines at most 1 MiB. A row is about 400
// bytes (500 with every field), so a million steps logged at every step (logging.every is 10 by
// default) make about 0.5 GB: a real run stays far below the cap, while a sparse file or one
// that is not a metrics log is refused before it fills the memory.
constexpr FileRule kJsonlRule{uint64_t{4} << 30, kExitRunDir,
                              "trainrun reads back the metrics.jsonl a run wrote: put that back, "
                              "or move this one away"};
constexpr size_t kMaxJsonlLine = size_t{1} << 20;  // no row is near it: such a line is skipped

// Every failure here is a file that could not be written (a full disk, an I/O error): exit 74,
// the code a checkpoint that cannot be written gives, which the supervisor does not restart (a
// full disk stays full).
Error metrics_error(const std::string& file, const std::string& why) {
  return Error(kExitWrite, fmt::format("metrics file {}: {} (free space or fix the file system, "
                                       "then continue with trainrun --resume RUN_DIR)",
                                       file, why));
}

// '/' would nest groups; HDF5 rejects empty names.
std::string h5_name(const std::string& s) {
  std::string out = s.empty() ? "_" : s;
  for (char& c : out)
    if (c == '/') c = '_';
  return out == "." ? "_" : out;
}

hsize_t extent_of(hid_t ds) {
  Handle space = space_h(H5Dget_space(ds), "get dataspace");
  hsize_t n = 0;
  check(H5Sget_simple_extent_dims(space, &n, nullptr), "get extent");
  return n;
}

std::optional<double> step_of(const MetricRow& row) {
  for (const auto& [key, value] : row)
    if (key == "step") {
      if (const double* d = std::get_if<double>(&value)) return *d;
      return std::nullopt;
    }
  return std::nullopt;
}

// The run's resolved config (RUN_DIR/config.yaml, which rank 0 writes before any MetricsLog)
// says whether TensorBoard files are written (logging.tensorboard; the default without it), and
// is itself logged to them as text. Reading it here keeps every writer of metrics (the trainer,
// the supervisor recording a restart) in step without each passing the setting along.
std::unique_ptr<TensorBoardLog> open_tensorboard(const std::string& run_dir, int64_t keep) {
  // A resolved config is a few KiB; the same rule as every reader of a run directory's files.
  const std::string text =
      read_regular_file((fs::path(run_dir) / "config.yaml").string(),
                        {uint64_t{1} << 20, kExitRunDir,
                         "it is the run's resolved config, which trainrun writes: move this one "
                         "away and continue with trainrun --resume RUN_DIR"})
          .value_or("");
  bool on = LoggingConfig{}.tensorboard;
  try {
    const YAML::Node y = YAML::Load(text);
    if (y["logging"] && y["logging"]["tensorboard"]) on = y["logging"]["tensorboard"].as<bool>();
  } catch (const YAML::Exception& e) {
    spdlog::warn("{}/config.yaml: {}; TensorBoard files {}", run_dir, e.what(),
                 on ? "written (the default)" : "off (the default)");
  }
  if (!on) return nullptr;
  return std::make_unique<TensorBoardLog>((fs::path(run_dir) / "tb").string(), keep, text);
}

}  // namespace

struct MetricsLog::Impl {
  std::string jsonl_path, h5_path;
  // Appended with one write(2) a line, unbuffered: `jsonl_bytes` is its length after the last
  // whole line, so a line cut short (ENOSPC) is cut off again and never left half-written.
  int jsonl = -1;
  off_t jsonl_bytes = 0;
  Handle file;
  std::unique_ptr<TensorBoardLog> tensorboard;  // null when logging.tensorboard is off

  struct Group {
    Handle g;
    hsize_t rows = 0;
    std::map<std::string, Handle> columns;
    std::vector<std::vector<std::pair<std::string, double>>> pending;
  };
  std::map<std::string, Group> groups;
  size_t pending_rows = 0;

  Handle file_access() {
    Handle fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS), "create file access properties");
    // No lock held by the writer, so plotting scripts and h5dump can open the file while the
    // run goes on (they read the state of the last flush()).
    check(H5Pset_file_locking(fapl, false, true), "disable file locking");
    check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), "set close degree");
    return fapl;
  }

  void create_h5() {
    refuse_link(h5_path);  // HDF5 opens by name
    Handle fapl = file_access();
    file = file_h(H5Fcreate(h5_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "create");
  }

  Group& group(const std::string& kind) {
    Group& g = groups[kind];
    if (g.g.get() < 0) {
      std::string name = h5_name(kind);
      g.g = group_h(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    name.c_str());
    }
    return g;
  }

  // A new column starts `rows` long, all NaN (the fill value), so it lines up with the others.
  Handle& column(Group& g, const std::string& field) {
    auto it = g.columns.find(field);
    if (it != g.columns.end()) return it->second;
    std::string name = h5_name(field);
    hsize_t dims = g.rows, maxdims = H5S_UNLIMITED, chunk = kChunkRows;
    Handle space = space_h(H5Screate_simple(1, &dims, &maxdims), "create dataspace");
    Handle dcpl = plist_h(H5Pcreate(H5P_DATASET_CREATE), "create dataset properties");
    check(H5Pset_chunk(dcpl, 1, &chunk), "set chunking");
    double nan = std::nan("");
    check(H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan), "set fill value");
    Handle ds =
        dset_h(H5Dcreate2(g.g, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
               name.c_str());
    if (field == "event") name_events(ds);
    if (const auto doc = metric_field_doc(field)) {
      string_attr(ds, "units", doc->units);
      string_attr(ds, "description", doc->description);
    }
    return g.columns.emplace(field, std::move(ds)).first->second;
  }

  // A fixed-length scalar string attribute (h5py reads it as bytes; h5dump as text).
  static void string_attr(hid_t ds, const char* name, std::string_view value) {
    Handle type = type_h(H5Tcopy(H5T_C_S1), "copy string type");
    check(H5Tset_size(type, value.empty() ? 1 : value.size()), "set string size");
    Handle scalar = space_h(H5Screate(H5S_SCALAR), "create scalar space");
    Handle attr = attr_h(H5Acreate2(ds, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT), name);
    const std::string text(value.empty() ? std::string_view("\0", 1) : value);
    check(H5Awrite(attr, type, text.data()), name);
  }

  // An event's kind is a word; its column holds the word's index in MetricEvent's table, and
  // the table itself as the column's "names" attribute (space-separated, in index order), so a
  // reader of metrics.h5 alone can tell a restart from a rollback.
  static void name_events(hid_t ds) {
    std::string names;
    for (const std::string_view n : enum_names<MetricEvent>()) {
      if (!names.empty()) names += ' ';
      names.append(n);
    }
    string_attr(ds, "names", names);
  }

  // Opens an existing file and cuts every group back to the rows with step <= keep.
  void open_and_truncate_h5(int64_t keep) {
    refuse_link(h5_path);
    Handle fapl = file_access();
    file = file_h(H5Fopen(h5_path.c_str(), H5F_ACC_RDWR, fapl), "open");
    for (const std::string& kind : member_names(file)) {
      Group& g = groups[kind];
      g.g = group_h(H5Gopen2(file, kind.c_str(), H5P_DEFAULT), kind.c_str());
      hsize_t rows = 0;
      for (const std::string& field : member_names(g.g)) {
        Handle ds = dset_h(H5Dopen2(g.g, field.c_str(), H5P_DEFAULT), field.c_str());
        rows = std::max(rows, extent_of(ds));
        g.columns.emplace(field, std::move(ds));
      }
      auto step = g.columns.find("step");
      if (step != g.columns.end()) {
        std::vector<double> steps(extent_of(step->second));
        if (!steps.empty())
          check(
              H5Dread(step->second, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps.data()),
              "read step");
        // Steps grow along the rows; everything from the first row past `keep` goes.
        rows = 0;
        while (rows < steps.size() && !(steps[rows] > double(keep))) ++rows;
      }
      // Also evens out columns a crash left at different lengths.
      for (auto& [field, ds] : g.columns) check(H5Dset_extent(ds, &rows), "shrink column");
      g.rows = rows;
    }
  }

  void queue(const std::string& kind, const MetricRow& row) {
    std::vector<std::pair<std::string, double>> numeric;
    for (const auto& [key, value] : row) {
      if (const double* d = std::get_if<double>(&value)) {
        numeric.emplace_back(key, *d);
      } else if (key == "event") {  // the kind, as its index in the names attribute
        if (const auto e = enum_from_name<MetricEvent>(std::get<std::string>(value)))
          numeric.emplace_back(key, static_cast<double>(*e));
      }
    }
    groups[kind].pending.push_back(std::move(numeric));
    ++pending_rows;
  }

  void write_pending() {
    if (pending_rows == 0) return;
    for (auto& [kind, g0] : groups) {
      if (g0.pending.empty()) continue;
      Group& g = group(kind);
      const hsize_t k = g.pending.size();
      std::map<std::string, std::vector<double>> values;
      for (hsize_t r = 0; r < k; ++r)
        for (const auto& [field, v] : g.pending[r]) {
          auto& col = values[field];
          if (col.empty()) col.assign(k, std::nan(""));
          col[r] = v;
        }
      for (const auto& [field, col] : values) column(g, field);
      hsize_t new_rows = g.rows + k;
      for (auto& [field, ds] : g.columns) {
        check(H5Dset_extent(ds, &new_rows), "extend column");
        auto it = values.find(field);
        if (it == values.end()) continue;  // absent in these rows: the NaN fill stands
        Handle space = space_h(H5Dget_space(ds), "get dataspace");
        hsize_t start = g.rows, count = k;
        check(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr),
              "select rows");
        Handle mem = space_h(H5Screate_simple(1, &count, nullptr), "create memory space");
        check(H5Dwrite(ds, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, it->second.data()),
              field.c_str());
      }
      g.rows = new_rows;
      g.pending.clear();
    }
    pending_rows = 0;
  }

  // Keeps the JSONL lines with step <= keep (lines without a step stay); returns the kept rows.
  std::vector<MetricRow> truncate_jsonl(int64_t keep) {
    std::vector<MetricRow> kept;
    // Read before it is rewritten: a link or a FIFO there is not the log this run wrote.
    refuse_special_file(jsonl_path);
    std::string out;
    size_t dropped_torn = 0;
    const bool there =
        read_regular_lines(jsonl_path, kJsonlRule, kMaxJsonlLine, [&](std::string_view line) {
          if (line.empty()) return;
          std::optional<MetricRow> row = parse_metrics_line(line);
          if (!row) {
            ++dropped_torn;
            return;
          }
          std::optional<double> step = step_of(*row);
          if (step && *step > double(keep)) return;
          out += line;
          out += '\n';
          kept.push_back(std::move(*row));
        });
    if (!there) return kept;
    if (dropped_torn)
      spdlog::warn("{}: dropped {} unreadable line(s) (a write cut short?)", jsonl_path,
                   dropped_torn);
    // Temp file and rename: a crash here leaves either the old or the new file, never half
    // (and a link at metrics.jsonl is replaced, not followed).
    try {
      write_file_durably(jsonl_path, out);
    } catch (const Error& e) {
      throw metrics_error(jsonl_path, std::string("cannot rewrite it: ") + e.what());
    }
    return kept;
  }
};

MetricsLog::MetricsLog(const std::string& run_dir, int64_t keep_through_step)
    : impl_(std::make_unique<Impl>()) {
  quiet();
  Impl& m = *impl_;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  m.jsonl_path = (fs::path(run_dir) / "metrics.jsonl").string();
  m.h5_path = (fs::path(run_dir) / "metrics.h5").string();

  std::vector<MetricRow> kept;
  if (keep_through_step >= 0) kept = m.truncate_jsonl(keep_through_step);
  m.jsonl = open_no_follow(m.jsonl_path,
                           O_WRONLY | O_CREAT | O_APPEND | (keep_through_step >= 0 ? 0 : O_TRUNC));
  if (m.jsonl < 0) throw metrics_error(m.jsonl_path, std::strerror(errno));
  m.jsonl_bytes = ::lseek(m.jsonl, 0, SEEK_END);

  try {
    bool reopened = false;
    if (keep_through_step >= 0 && fs::exists(m.h5_path, ec)) {
      try {
        m.open_and_truncate_h5(keep_through_step);
        reopened = true;
      } catch (const H5Failure& e) {
        // A crash mid-flush can leave the HDF5 file unreadable; the JSONL has the same rows.
        m.groups.clear();
        m.file.reset();
        std::string aside = m.h5_path + ".damaged";
        spdlog::warn("{} is damaged ({}); moved to {} and rebuilt from {}", m.h5_path, e.what(),
                     aside, m.jsonl_path);
        fs::rename(m.h5_path, aside, ec);
      }
    }
    if (!reopened) {
      m.create_h5();
      for (MetricRow& row : kept) {
        std::string kind = "train";
        for (auto it = row.begin(); it != row.end(); ++it)
          if (it->first == "kind") {
            if (auto* s = std::get_if<std::string>(&it->second)) kind = *s;
            row.erase(it);
            break;
          }
        m.queue(kind, row);
      }
      m.write_pending();
    }
    check(H5Fflush(m.file, H5F_SCOPE_GLOBAL), "flush");
  } catch (const H5Failure& e) {
    ::close(m.jsonl);
    m.jsonl = -1;
    throw metrics_error(m.h5_path, e.what());
  }
  try {
    m.tensorboard = open_tensorboard(run_dir, keep_through_step);
  } catch (...) {
    ::close(m.jsonl);
    m.jsonl = -1;
    throw;
  }
}

MetricsLog::~MetricsLog() {
  try {
    flush();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
  }
  impl_->groups.clear();
  impl_->file.reset();
  if (impl_->jsonl >= 0) ::close(impl_->jsonl);
}

void MetricsLog::append(const std::string& kind, const MetricRow& row) {
  Impl& m = *impl_;
  std::string line = format_metrics_line(kind, row);
  line += '\n';
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(m.jsonl, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      // The part that was written goes again: a reader (report, a resume) sees whole lines only.
      if (done > 0 && ::ftruncate(m.jsonl, m.jsonl_bytes) != 0)
        spdlog::warn("{}: cannot cut off a half-written line: {}", m.jsonl_path,
                     std::strerror(errno));
      throw metrics_error(m.jsonl_path, std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  m.jsonl_bytes += static_cast<off_t>(line.size());
  m.queue(kind, row);
  if (m.tensorboard) m.tensorboard->append(kind, row);
  if (m.pending_rows >= kMaxPendingRows) {
    quiet();
    try {
      m.write_pending();
    } catch (const H5Failure& e) {
      throw metrics_error(m.h5_path, e.what());
    }
  }
}

void MetricsLog::flush() {
  Impl& m = *impl_;
  quiet();
  try {
    m.write_pending();
    if (m.file.get() >= 0) check(H5Fflush(m.file, H5F_SCOPE_GLOBAL), "flush");
  } catch (const H5Failure& e) {
    throw metrics_error(m.h5_path, e.what());
  }
  if (m.tensorboard) m.tensorboard->flush();
}

std::vector<MetricRow> read_metrics_jsonl(const std::string& run_dir, const std::string& kind) {
  std::vector<MetricRow> rows;
  read_regular_lines((fs::path(run_dir) / "metrics.jsonl").string(), kJsonlRule, kMaxJsonlLine,
                     [&](std::string_view line) {
                       std::optional<MetricRow> row = parse_metrics_line(line);
                       if (!row || row->empty() || row->front().first != "kind") return;
                       const auto* k = std::get_if<std::string>(&row->front().second);
                       if (!k || *k != kind) return;
                       row->erase(row->begin());
                       rows.push_back(std::move(*row));
                     });
  return rows;
}

}  // namespace trainrun
