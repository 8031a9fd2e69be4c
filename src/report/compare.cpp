#include "trainrun/report/compare.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "report_summary.h"
#include "svg_plot.h"
#include "text_table.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/report/run_index.h"
#include "trainrun/report/sweep_manifest.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

constexpr size_t kMetrics = std::size(kCompareMetrics);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Figures = std::array<double, kMetrics>;

// One run as compare sees it.
struct Run {
  std::string dir;
  std::string label;                          // the column "run": its directory's name
  std::map<std::string, std::string> config;  // every key, flattened ("optimizer.lr")
  std::string status;
  int exit_code = -1;
  Figures fig;
};

void flatten(const YAML::Node& n, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.Scalar();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (n.IsScalar()) {
    out[prefix] = n.Scalar();
  } else if (!n.IsNull()) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[prefix] = e.c_str();
  }
}

// The run's config.yaml read as a run reads a config (every rule), then flattened from its
// resolved form, so two runs that spell a value differently still compare equal.
std::map<std::string, std::string> run_config(const fs::path& dir) {
  const std::string path = (dir / "config.yaml").string();
  const FileRule rule{uint64_t{1} << 20, kExitRunDir,
                      "compare reads the config.yaml its run wrote: put that back, or leave the "
                      "run out"};
  const std::optional<std::string> text = read_regular_file(path, rule);
  std::map<std::string, std::string> out;
  if (!text) return out;
  Experiment exp;
  try {
    exp = parse_experiment(*text, path, {});
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("compare: {}", e.what()));
  }
  flatten(YAML::Load(to_yaml(exp)), "", out);
  out.erase("run_dir");  // differs between any two runs, and is the column "run" already
  return out;
}

double mean_after_warmup(const std::vector<MetricRow>& rows, const char* key) {
  double sum = 0;
  int n = 0;
  for (size_t i = rows.size() > 1 ? 1 : 0; i < rows.size(); ++i) {
    const double v = report::number(rows[i], key);
    if (std::isfinite(v)) sum += v, ++n;
  }
  return n ? sum / n : kNaN;
}

}  // namespace

Figures run_figures(const std::string& run_dir) {
  const fs::path dir(run_dir);
  Figures f;
  f.fill(kNaN);
  const auto train = read_metrics_jsonl(dir.string(), "train");
  const auto evals = read_metrics_jsonl(dir.string(), "eval");
  if (!train.empty()) {
    f[0] = report::number(train.back(), "step");
    f[1] = report::number(train.back(), "loss");
    f[4] = mean_after_warmup(train, "tokens_per_sec");
    f[5] = mean_after_warmup(train, "mfu");
    double seconds = 0, prev = 0;
    for (const MetricRow& r : train) {
      const double step = report::number(r, "step"), t = report::number(r, "step_time");
      if (std::isfinite(t) && step > prev) seconds += t * (step - prev);
      prev = step;
    }
    f[6] = seconds;
  }
  for (const MetricRow& r : evals) {
    const double v = report::number(r, "val_loss");
    if (!std::isfinite(v)) continue;
    f[3] = v;
    f[2] = std::isnan(f[2]) ? v : std::min(f[2], v);
  }
  return f;
}

namespace {

std::string status_of(const fs::path& dir, const Run& run, const SweepPoint* point) {
  const auto steps = run.config.find("train.steps");
  return status_text(
      run_status(dir.string(), point, std::isnan(run.fig[0]) ? -1 : int64_t(run.fig[0]),
                 steps == run.config.end() ? -1 : std::stoll(steps->second)),
      "live");
}

Run read_run(const fs::path& dir, const SweepPoint* point, const SweepManifest* sweep) {
  Run r;
  r.dir = dir.string();
  r.label = dir.filename().string();
  r.config = run_config(dir);
  if (r.config.empty() && sweep && point) {
    // A point that never started: what its overrides say.
    for (const auto* list : {&sweep->sets, &point->overrides})
      for (const std::string& kv : *list)
        if (const size_t eq = kv.find('='); eq != std::string::npos)
          r.config[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  r.fig = run_figures(dir.string());
  r.status = status_of(dir, r, point);
  if (point) r.exit_code = point->exit_code;
  return r;
}

void collect(const fs::path& path, std::vector<Run>& out, bool top) {
  if (is_sweep_dir(path.string())) {
    const SweepManifest m = read_sweep_manifest(path.string());
    for (const SweepPoint& p : m.points) out.push_back(read_run(path / p.name, &p, &m));
    return;
  }
  if (is_run_dir(path.string())) {
    out.push_back(read_run(path, nullptr, nullptr));
    return;
  }
  std::error_code ec;
  if (!top || !fs::is_directory(path, ec)) return;
  std::vector<fs::path> subdirs;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec)) subdirs.push_back(it->path());
  std::sort(subdirs.begin(), subdirs.end());
  for (const fs::path& s : subdirs) collect(s, out, false);
}

// Sort direction: losses and time ascending, the rest (steps, throughput, MFU) descending.
bool lower_is_better(size_t m) {
  return m == 1 || m == 2 || m == 3 || m == 6;
}

size_t metric_index(const std::string& name) {
  for (size_t i = 0; i < kMetrics; ++i)
    if (name == kCompareMetrics[i]) return i;
  std::string known;
  for (const char* m : kCompareMetrics) {
    if (!known.empty()) known += ", ";
    known += m;
  }
  throw ConfigError(fmt::format("compare --sort {}: no such figure; one of {}", name, known));
}

// The keys whose values are not all equal (a key some run lacks counts as differing).
std::vector<std::string> differing_keys(const std::vector<Run>& runs) {
  std::set<std::string> all;
  for (const Run& r : runs)
    for (const auto& [k, v] : r.config) all.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : all) {
    const auto first = runs.front().config.find(k);
    for (const Run& r : runs) {
      const auto it = r.config.find(k);
      if ((it == r.config.end()) != (first == runs.front().config.end()) ||
          (it != r.config.end() && it->second != first->second)) {
        out.push_back(k);
        break;
      }
    }
  }
  return out;
}

std::string value_of(const Run& r, const std::string& key) {
  const auto it = r.config.find(key);
  return it == r.config.end() ? "-" : it->second;
}

std::string num(double v) {
  return std::isfinite(v) ? fmt::format("{:.6g}", v) : "-";
}

nlohmann::json json_num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nullptr;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string csv_table(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) out += ',';
      out += csv_field(row[c]);
    }
    out += "\n";
  }
  return out;
}

// csv_table's rows back as cells (quoted fields unquoted): the HTML table shows what --csv does.
std::vector<std::vector<std::string>> split_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n') {
      rows.back().push_back(std::move(cell));
      cell.clear();
      rows.emplace_back();
    } else {
      cell += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

struct Group {
  std::vector<const Run*> runs;
  Figures mean, stderr_;
};

std::vector<Group> group_by_seed(const std::vector<Run>& runs,
                                 const std::vector<std::string>& keys) {
  std::vector<Group> groups;
  std::vector<std::vector<std::string>> group_keys;
  for (const Run& r : runs) {
    std::vector<std::string> k;
    for (const std::string& key : keys) k.push_back(value_of(r, key));
    const auto at = std::find(group_keys.begin(), group_keys.end(), k);
    if (at == group_keys.end()) {
      group_keys.push_back(k);
      groups.push_back({{&r}, {}, {}});
    } else {
      groups[static_cast<size_t>(at - group_keys.begin())].runs.push_back(&r);
    }
  }
  for (Group& g : groups) {
    for (size_t m = 0; m < kMetrics; ++m) {
      std::vector<double> v;
      for (const Run* r : g.runs)
        if (std::isfinite(r->fig[m])) v.push_back(r->fig[m]);
      double sum = 0;
      for (double x : v) sum += x;
      g.mean[m] = v.empty() ? kNaN : sum / static_cast<double>(v.size());
      double ss = 0;
      for (double x : v) ss += (x - g.mean[m]) * (x - g.mean[m]);
      g.stderr_[m] = v.size() < 2 ? kNaN
                                  : std::sqrt(ss / static_cast<double>(v.size() - 1)) /
                                        std::sqrt(static_cast<double>(v.size()));
    }
  }
  return groups;
}

template <class T, class Key>
void sort_best_first(std::vector<T>& rows, size_t m, Key key) {
  std::stable_sort(rows.begin(), rows.end(), [&](const T& a, const T& b) {
    const double x = key(a), y = key(b);
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return lower_is_better(m) ? x < y : x > y;
  });
}

std::string ungrouped(std::vector<Run> runs, const std::vector<std::string>& keys,
                      const CompareOptions& opt) {
  if (!opt.sort.empty())
    sort_best_first(runs, metric_index(opt.sort),
                    [&](const Run& r) { return r.fig[metric_index(opt.sort)]; });
  if (opt.format == CompareFormat::json) {
    nlohmann::json j;
    j["keys"] = keys;
    j["runs"] = nlohmann::json::array();
    for (const Run& r : runs) {
      nlohmann::json row{{"run", r.dir}, {"status", r.status}};
      nlohmann::json cfg = nlohmann::json::object();
      for (const std::string& k : keys) cfg[k] = value_of(r, k);
      row["config"] = cfg;
      for (size_t m = 0; m < kMetrics; ++m) row[kCompareMetrics[m]] = json_num(r.fig[m]);
      j["runs"].push_back(row);
    }
    return j.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> rows(1);
  rows[0].push_back("run");
  for (const std::string& k : keys) rows[0].push_back(k);
  rows[0].push_back("status");
  for (const char* m : kCompareMetrics) rows[0].push_back(m);
  for (const Run& r : runs) {
    std::vector<std::string> row{opt.format == CompareFormat::csv ? r.dir : r.label};
    for (const std::string& k : keys) row.push_back(value_of(r, k));
    row.push_back(r.status);
    for (double v : r.fig)
      row.push_back(opt.format == CompareFormat::csv && !std::isfinite(v) ? std::string() : num(v));
    rows.push_back(row);
  }
  return opt.format == CompareFormat::table ? report::text_table(rows) : csv_table(rows);
}

std::string grouped(const std::vector<Run>& runs, std::vector<std::string> keys,
                    const CompareOptions& opt) {
  keys.erase(std::remove(keys.begin(), keys.end(), "seed"), keys.end());
  std::vector<Group> groups = group_by_seed(runs, keys);
  if (!opt.sort.empty()) {
    const size_t m = metric_index(opt.sort);
    sort_best_first(groups, m, [&](const Group& g) { return g.mean[m]; });
  }
  if (opt.format == CompareFormat::json) {
    nlohmann::json j;
    j["keys"] = keys;
    j["groups"] = nlohmann::json::array();
    for (const Group& g : groups) {
      nlohmann::json cfg = nlohmann::json::object(), mean, se, dirs = nlohmann::json::array();
      for (const std::string& k : keys) cfg[k] = value_of(*g.runs.front(), k);
      for (const Run* r : g.runs) dirs.push_back(r->dir);
      for (size_t m = 0; m < kMetrics; ++m) {
        mean[kCompareMetrics[m]] = json_num(g.mean[m]);
        se[kCompareMetrics[m]] = json_num(g.stderr_[m]);
      }
      j["groups"].push_back(
          {{"config", cfg}, {"n", g.runs.size()}, {"runs", dirs}, {"mean", mean}, {"stderr", se}});
    }
    return j.dump(2) + "\n";
  }
  std::vector<std::vector<std::string>> rows(1);
  for (const std::string& k : keys) rows[0].push_back(k);
  rows[0].push_back("n");
  for (const char* m : kCompareMetrics) {
    if (opt.format == CompareFormat::csv) {
      rows[0].push_back(std::string(m) + "_mean");
      rows[0].push_back(std::string(m) + "_stderr");
    } else {
      rows[0].push_back(std::string(m) + " (mean ± se)");
    }
  }
  for (const Group& g : groups) {
    std::vector<std::string> row;
    for (const std::string& k : keys) row.push_back(value_of(*g.runs.front(), k));
    row.push_back(std::to_string(g.runs.size()));
    for (size_t m = 0; m < kMetrics; ++m) {
      if (opt.format == CompareFormat::csv) {
        row.push_back(std::isfinite(g.mean[m]) ? num(g.mean[m]) : "");
        row.push_back(std::isfinite(g.stderr_[m]) ? num(g.stderr_[m]) : "");
      } else {
        row.push_back(std::isfinite(g.stderr_[m])
                          ? fmt::format("{} ± {}", num(g.mean[m]), num(g.stderr_[m]))
                          : num(g.mean[m]));
      }
    }
    rows.push_back(row);
  }
  return opt.format == CompareFormat::table ? report::text_table(rows) : csv_table(rows);
}

// The runs the paths name, labelled (a label names a run once).
std::vector<Run> runs_of(const std::vector<std::string>& paths, const CompareOptions& opt) {
  if (!opt.sort.empty()) metric_index(opt.sort);  // a bad name fails before any reading
  std::vector<Run> runs;
  for (const std::string& p : paths) {
    const size_t before = runs.size();
    collect(p, runs, true);
    if (runs.size() == before)
      throw ConfigError(fmt::format(
          "compare: {} holds no run (a run directory holds config.yaml and metrics.jsonl, a "
          "sweep directory sweep.json); name run or sweep directories, or a directory of them",
          p));
  }
  // A label names a run once: two runs of one name in different places show their paths.
  std::map<std::string, int> seen;
  for (const Run& r : runs) ++seen[r.label];
  for (Run& r : runs)
    if (seen[r.label] > 1) r.label = r.dir;
  return runs;
}

constexpr const char* kPageStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 12px; }
.plots { display: grid; grid-template-columns: repeat(2, 640px); gap: 12px; margin-top: 16px; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #e4e4e4; padding: 3px 10px; text-align: left; }
th { background: #f2f2f2; }
)CSS";

// Run i of n's colour: hues spread evenly, so any number of runs stay apart.
std::string colour(size_t i, size_t n) {
  return fmt::format("hsl({},70%,42%)", static_cast<int>(360.0 * i / std::max<size_t>(n, 1)));
}

}  // namespace

std::string compare_runs(const std::vector<std::string>& paths, const CompareOptions& opt) {
  std::vector<Run> runs = runs_of(paths, opt);
  const std::vector<std::string> keys = differing_keys(runs);
  return opt.group_seeds ? grouped(runs, keys, opt) : ungrouped(std::move(runs), keys, opt);
}

void write_compare_html(const std::vector<std::string>& paths, const CompareOptions& opt,
                        const std::string& out) {
  const std::vector<Run> runs = runs_of(paths, opt);
  const std::vector<std::string> keys = differing_keys(runs);
  CompareOptions table_opt = opt;
  table_opt.format = CompareFormat::csv;  // cells, escaped below
  const std::string csv =
      opt.group_seeds ? grouped(runs, keys, table_opt) : ungrouped(runs, keys, table_opt);
  std::string table = "<table>\n";
  bool header = true;
  for (const auto& row : split_csv(csv)) {
    table += "<tr>";
    for (const std::string& cell : row)
      table += fmt::format("<{0}>{1}</{0}>", header ? "th" : "td", report::html_escape(cell));
    table += "</tr>\n";
    header = false;
  }
  table += "</table>\n";
  struct Metric {
    const char *kind, *key, *title, *y;
  };
  const Metric metrics[] = {{"train", "loss", "train loss", "loss (nats per token)"},
                            {"eval", "val_loss", "val loss", "loss (nats per token)"},
                            {"train", "lr", "learning rate", "learning rate"},
                            {"train", "tokens_per_sec", "throughput", "tokens per second"}};
  std::string plots = "<div class=\"plots\">\n";
  for (const Metric& m : metrics) {
    std::vector<report::Series> series;
    for (size_t i = 0; i < runs.size(); ++i) {
      std::string name = runs[i].label;
      for (const std::string& k : keys) name += " " + k + "=" + value_of(runs[i], k);
      report::Series s{name, colour(i, runs.size()), {}, std::string(m.kind) == "eval"};
      for (const MetricRow& r : read_metrics_jsonl(runs[i].dir, m.kind))
        s.points.emplace_back(report::number(r, "step"), report::number(r, m.key));
      series.push_back(std::move(s));
    }
    report::ChartAxes axes;
    axes.y_title = m.y;
    plots += report::svg_line_chart(m.title, series, axes, 640, 360);
  }
  plots += "</div>\n";
  replace_file(out, fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
                                "charset=\"utf-8\">\n<title>trainrun compare</title>\n<style>{}{}"
                                "</style>\n</head>\n<body>\n<h1>{} runs</h1>\n{}{}</body>\n"
                                "</html>\n",
                                kPageStyle, report::kSvgChartStyle, runs.size(), table, plots));
}

}  // namespace trainrun
