// report_text / write_report_plot: `trainrun report RUN_DIR`. Everything comes from the run
// directory (metrics.jsonl, config.yaml), so a report can be made anywhere the directory is
// copied, during the run or after it.
#include "trainrun/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "trainrun/errors.h"
#include "trainrun/metrics.h"

extern char** environ;

namespace fs = std::filesystem;

namespace trainrun {

namespace {

std::optional<double> num(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const double* d = std::get_if<double>(&v)) return *d;
      return std::nullopt;
    }
  return std::nullopt;
}

std::string str(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const auto* s = std::get_if<std::string>(&v)) return *s;
      if (const double* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
    }
  return "";
}

double value(const MetricRow& row, const std::string& key) {
  return num(row, key).value_or(NAN);
}

void require_run_dir(const std::string& run_dir) {
  if (!fs::is_directory(run_dir))
    throw ConfigError(
        fmt::format("report: {} is not a directory: give a run directory "
                    "(runs/NAME, or the run's --run-dir)",
                    run_dir));
  if (!fs::exists(fs::path(run_dir) / "metrics.jsonl"))
    throw ConfigError(
        fmt::format("report: {}/metrics.jsonl is missing: is this a run directory? "
                    "(it appears once the first step is logged)",
                    run_dir));
}

struct RunConfig {
  std::string name;
  int64_t steps = -1;
  std::string summary;
};

RunConfig read_config(const std::string& run_dir) {
  RunConfig c;
  const fs::path path = fs::path(run_dir) / "config.yaml";
  if (!fs::exists(path)) return c;
  try {
    YAML::Node y = YAML::LoadFile(path.string());
    c.name = y["name"] ? y["name"].as<std::string>() : "";
    if (y["train"] && y["train"]["steps"]) c.steps = y["train"]["steps"].as<int64_t>();
    if (const YAML::Node m = y["model"]) {
      const std::string type = m["type"] ? m["type"].as<std::string>() : "gpt";
      c.summary =
          type == "mlp"
              ? fmt::format("mlp d_model {} seq_len {} vocab {}", m["d_model"].as<int>(),
                            m["seq_len"].as<int>(), m["vocab_size"].as<int>())
              : fmt::format("gpt {} layers d_model {} heads {} seq_len {} vocab {}",
                            m["n_layer"].as<int>(), m["d_model"].as<int>(), m["n_head"].as<int>(),
                            m["seq_len"].as<int>(), m["vocab_size"].as<int>());
    }
    if (const YAML::Node d = y["distributed"])
      c.summary += fmt::format(" | {} rank(s)", d["nproc"].as<int>() * d["nodes"].as<int>());
    if (y["device"]) c.summary += fmt::format(" | device {}", y["device"].as<std::string>());
  } catch (const YAML::Exception& e) {
    c.summary = fmt::format("(config.yaml unreadable: {})", e.what());
  }
  return c;
}

double mean(const std::vector<MetricRow>& rows, const std::string& key) {
  double s = 0;
  int n = 0;
  for (const auto& r : rows) {
    const double v = value(r, key);
    if (std::isfinite(v)) {
      s += v;
      ++n;
    }
  }
  return n ? s / n : NAN;
}

std::string fmt_value(double v, const char* spec = "{:.4f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "n/a";
}

// Steps as "3, 7, 12" with at most `max` shown.
std::string step_list(const std::set<int64_t>& steps, size_t max = 10) {
  std::string s;
  size_t i = 0;
  for (int64_t st : steps) {
    if (i++ == max) return s + fmt::format(", ... ({} in all)", steps.size());
    s += fmt::format("{}{}", s.empty() ? "" : ", ", st);
  }
  return s;
}

}  // namespace

std::string report_text(const std::string& run_dir) {
  require_run_dir(run_dir);
  const RunConfig cfg = read_config(run_dir);
  const auto train = read_metrics_jsonl(run_dir, "train");
  const auto evals = read_metrics_jsonl(run_dir, "eval");
  const auto events = read_metrics_jsonl(run_dir, "event");

  std::string s = fmt::format("run {} ({})\n", cfg.name.empty() ? "?" : cfg.name, run_dir);
  if (!cfg.summary.empty()) s += fmt::format("  {}\n", cfg.summary);
  auto line = [&s](const std::string& k, const std::string& v) {
    s += fmt::format("  {:<12} {}\n", k, v);
  };

  const double last_step = train.empty() ? 0 : value(train.back(), "step");
  if (cfg.steps > 0)
    line("steps", fmt::format("{:.0f} / {} ({:.0f}%)", last_step, cfg.steps,
                              100.0 * last_step / static_cast<double>(cfg.steps)));
  else
    line("steps", fmt::format("{:.0f} (total unknown: no config.yaml)", last_step));
  if (train.empty()) {
    line("metrics", "no training rows logged yet");
    return s;
  }
  line("tokens", fmt::format("{:.0f} seen", value(train.back(), "tokens_seen")));

  // Losses.
  line("train loss",
       fmt::format("{} at step {:.0f} (first logged {})", fmt_value(value(train.back(), "loss")),
                   last_step, fmt_value(value(train.front(), "loss"))));
  if (!evals.empty()) {
    const MetricRow* best = nullptr;
    for (const auto& r : evals)
      if (std::isfinite(value(r, "val_loss")) &&
          (!best || value(r, "val_loss") < value(*best, "val_loss")))
        best = &r;
    line("val loss",
         fmt::format("final {} (step {:.0f}), best {} (step {:.0f})",
                     fmt_value(value(evals.back(), "val_loss")), value(evals.back(), "step"),
                     best ? fmt_value(value(*best, "val_loss")) : "n/a",
                     best ? value(*best, "step") : NAN));
  } else {
    line("val loss", "no evaluations");
  }

  // Throughput over the last half: the first steps include warm-up and allocation.
  std::vector<MetricRow> late;
  for (const auto& r : train)
    if (value(r, "step") > last_step / 2) late.push_back(r);
  if (late.empty()) late = train;
  line("throughput", fmt::format("{} tokens/s, MFU {}% (mean of {} logged steps in {:.0f}..{:.0f})",
                                 fmt_value(mean(late, "tokens_per_sec"), "{:.0f}"),
                                 fmt_value(100 * mean(late, "mfu"), "{:.1f}"), late.size(),
                                 value(late.front(), "step"), last_step));

  // Time per phase, over every logged step.
  const double step_time = mean(train, "step_time");
  s += fmt::format("  time per step {} ms (mean of {} logged steps); phases:\n",
                   fmt_value(step_time * 1e3, "{:.2f}"), train.size());
  const std::pair<const char*, const char*> phases[] = {
      {"t_data", "data"},
      {"t_forward", "forward"},
      {"t_backward", "backward"},
      {"t_comm", "comm (total, overlaps backward)"},
      {"t_comm_exposed", "comm exposed"},
      {"t_optimizer", "optimizer"},
      {"t_checkpoint", "checkpoint"}};
  for (const auto& [key, label] : phases) {
    const double m = mean(train, key);
    s += fmt::format("    {:<32} {:>10} ms {:>6}%\n", label, fmt_value(m * 1e3, "{:.2f}"),
                     fmt_value(100 * m / step_time, "{:.1f}"));
  }

  // Restarts, stragglers and bad steps.
  std::vector<std::string> restarts;
  std::map<std::string, std::pair<int, std::set<int64_t>>> stragglers;  // "rank R on H (phase)"
  std::set<std::string> straggler_ranks;
  std::set<int64_t> bad;
  std::map<std::string, std::set<int64_t>> other;  // loss spikes, rollbacks, ...
  for (const auto& r : events) {
    const std::string ev = str(r, "event");
    const int64_t step = static_cast<int64_t>(value(r, "step"));
    if (ev == "restart") {
      const std::string cause = str(r, "cause");
      restarts.push_back(fmt::format("at step {}{}{}", step, cause.empty() ? "" : ": ", cause));
    } else if (ev == "straggler") {
      auto& e = stragglers[fmt::format("rank {} on {} (phase {})", str(r, "rank"), str(r, "host"),
                                       str(r, "phase"))];
      ++e.first;
      straggler_ranks.insert(str(r, "rank"));
      e.second.insert(step);
    } else if (ev == "bad_step") {
      bad.insert(step);
    } else {
      other[ev.empty() ? "?" : ev].insert(step);
    }
  }
  for (const auto& r : train)
    if (!std::isfinite(value(r, "loss")) || !std::isfinite(value(r, "grad_norm")))
      bad.insert(static_cast<int64_t>(value(r, "step")));
  line("restarts", restarts.empty() ? "none" : fmt::format("{}", restarts.size()));
  for (const auto& r : restarts) s += fmt::format("    {}\n", r);
  line("stragglers",
       stragglers.empty() ? "none" : fmt::format("{} rank(s)", straggler_ranks.size()));
  for (const auto& [who, e] : stragglers)
    s += fmt::format("    {}: {} time(s), steps {}\n", who, e.first, step_list(e.second));
  for (const auto& [ev, steps] : other)
    line(ev, fmt::format("{} time(s), steps {}", steps.size(), step_list(steps)));
  line("bad steps",
       bad.empty() ? "none" : fmt::format("{} (steps {})", bad.size(), step_list(bad)));
  return s;
}

namespace {

// Missing values are "?", which the plot script declares as missing.
std::string tsv(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : "?";
}

// The plot, four panels against step. scripts/plot-metrics.gp is the same picture for use by hand.
constexpr const char* kPlotScript = R"GP(
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1400,900 noenhanced font ",10"
} else {
  set terminal png size 1400,900 noenhanced
}
set output out
set datafile separator "\t"
set datafile missing "?"
set key top right
set grid
set multiplot layout 2,2 title title
set title "loss"
set xlabel "step"
if (has_eval) {
  plot train using 1:2 with lines title "train", evals using 1:2 with linespoints title "val"
} else {
  plot train using 1:2 with lines title "train"
}
set title "learning rate"
plot train using 1:3 with lines notitle
set title "tokens/s"
plot train using 1:4 with lines notitle
set title "grad norm and MFU"
set ytics nomirror
set y2tics
set ylabel "grad norm"
set y2label "MFU %"
plot train using 1:5 with lines title "grad norm" axes x1y1, \
     train using 1:($6*100) with lines title "MFU %" axes x1y2
unset multiplot
)GP";

std::string find_on_path(const std::string& prog) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const fs::path p = fs::path(dir.empty() ? "." : dir) / prog;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

std::string gp_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trainrun-report-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw Error(kExitFailure, "report: cannot create a temporary directory in " +
                                    fs::temp_directory_path().string());
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

std::string write_report_plot(const std::string& run_dir, const std::string& out_arg) {
  require_run_dir(run_dir);
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty())
    throw Error(kExitFailure,
                "report: gnuplot is not on PATH: install gnuplot-nox (apt-get install "
                "gnuplot-nox) to draw the plot; the text report needs nothing");
  const auto train = read_metrics_jsonl(run_dir, "train");
  const auto evals = read_metrics_jsonl(run_dir, "eval");
  if (train.empty())
    throw ConfigError(
        fmt::format("report: {}/metrics.jsonl has no training rows to plot yet", run_dir));
  const std::string out = out_arg.empty() ? (fs::path(run_dir) / "report.png").string() : out_arg;
  const fs::path parent = fs::absolute(out).parent_path();
  if (!fs::is_directory(parent))
    throw ConfigError(
        fmt::format("report: --out {}: directory {} does not exist", out, parent.string()));

  TempDir tmp;
  {
    std::ofstream f(tmp.path / "train.tsv");
    for (const auto& r : train)
      f << tsv(value(r, "step")) << '\t' << tsv(value(r, "loss")) << '\t' << tsv(value(r, "lr"))
        << '\t' << tsv(value(r, "tokens_per_sec")) << '\t' << tsv(value(r, "grad_norm")) << '\t'
        << tsv(value(r, "mfu")) << '\n';
    std::ofstream e(tmp.path / "eval.tsv");
    for (const auto& r : evals)
      e << tsv(value(r, "step")) << '\t' << tsv(value(r, "val_loss")) << '\n';
    std::ofstream g(tmp.path / "plot.gp");
    const RunConfig cfg = read_config(run_dir);
    g << "train = " << gp_string((tmp.path / "train.tsv").string()) << "\n"
      << "evals = " << gp_string((tmp.path / "eval.tsv").string()) << "\n"
      << "has_eval = " << (evals.empty() ? 0 : 1) << "\n"
      << "out = " << gp_string((tmp.path / "plot.png").string()) << "\n"
      << "title = " << gp_string(fmt::format("trainrun {}", cfg.name.empty() ? run_dir : cfg.name))
      << "\n"
      << kPlotScript;
  }

  // gnuplot's messages go to a file, shown only when it fails.
  const std::string script = (tmp.path / "plot.gp").string();
  const std::string errors = (tmp.path / "gnuplot.err").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::string arg0 = "gnuplot";
  std::string arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, gnuplot.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error(kExitFailure,
                fmt::format("report: cannot start {}: {}", gnuplot, std::strerror(rc)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const fs::path png = tmp.path / "plot.png";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(png)) {
    std::ifstream f(errors);
    std::stringstream msg;
    msg << f.rdbuf();
    throw Error(kExitFailure,
                fmt::format("report: gnuplot failed drawing {}:\n{}", out, msg.str()));
  }
  // Drawn in the temporary directory first: a failed plot never leaves a stale or partial file.
  fs::copy_file(png, out, fs::copy_options::overwrite_existing);
  return out;
}

}  // namespace trainrun
