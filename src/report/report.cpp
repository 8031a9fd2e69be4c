// report_text / write_report_plot: `trainrun report RUN_DIR`, the summary as text and the plot
// drawn by gnuplot. Everything comes from the run directory (metrics.jsonl, config.yaml), so a
// report can be made anywhere the directory is copied, during the run or after it.
#include "trainrun/report/report.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "report_output.h"
#include "report_summary.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/obs/metrics.h"

extern char** environ;

namespace fs = std::filesystem;

namespace trainrun {

using report::number;

std::string report_text(const std::string& run_dir) {
  const report::RunSummary summary = report::summarize_run(run_dir);
  std::string s = fmt::format("run {} ({})\n", summary.name, run_dir);
  if (!summary.description.empty()) s += fmt::format("  {}\n", summary.description);
  for (const report::SummaryLine& l : summary.lines) {
    s += l.key.empty() ? fmt::format("  {}\n", l.value)
                       : fmt::format("  {:<12} {}\n", l.key, l.value);
    for (const std::string& d : l.details) s += fmt::format("    {}\n", d);
  }
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
set format y "%g"
set xlabel "step"
if (last_step - first_step < 10) { set xtics 1 }
set multiplot layout 2,2 title title
set title "loss"
set ylabel "loss (nats per token)"
if (has_eval) {
  plot train using 1:2 with lines title "train", evals using 1:2 with linespoints title "val"
} else {
  plot train using 1:2 with lines title "train"
}
set title "learning rate"
set ylabel "learning rate"
plot train using 1:3 with lines notitle
set title "tokens/s"
set ylabel "tokens per second"
plot train using 1:4 with lines notitle
set title "grad norm and MFU"
set ytics nomirror
set y2tics
set ylabel "gradient L2 norm (before clipping)"
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

// A gnuplot string literal. In single quotes only '' is special: no backslash escapes and no
// `command` substitution (which double quotes do). A newline still ends the line, and with it
// the string, and starts a new command: a run directory named "x<newline>system(...)" ran that
// command. So a control character is written as the text \xNN: shown in the title, never acted
// on. The run directory's name and TMPDIR's reach the script through here.
std::string gp_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\'')
      out += "''";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + "'";
}

// Restarts and rollbacks as dashed vertical lines, labelled, on every panel.
std::string marks_gp(const std::vector<std::pair<double, std::string>>& marks) {
  std::string s;
  for (const auto& [step, what] : marks)
    s += fmt::format(
        "set arrow from {0}, graph 0 to {0}, graph 1 nohead dashtype 2 lc rgb '#888888'\n"
        "set label {1} at {0}, graph 0.95 offset 0.5, 0 tc rgb '#666666'\n",
        step, gp_string(what));
  return s;
}

// gnuplot's input and picture, in a folder of its own under TMPDIR; removed with everything in
// it when the report is done.
struct TempDir {
  fs::path path;
  TempDir() {
    const char* env = std::getenv("TMPDIR");
    const std::string fix =
        env ? "the plot is drawn there first: set TMPDIR to a writable directory, or unset it "
              "(then /tmp)"
            : "the plot is drawn there first: create /tmp, or set TMPDIR to a writable directory";
    std::error_code ec;
    const fs::path base = fs::temp_directory_path(ec);
    if (ec)
      throw Error(kExitWrite, fmt::format("report: the temporary directory {} ({}) is not usable "
                                          "({}); {}",
                                          env ? env : "/tmp", env ? "TMPDIR" : "the default",
                                          ec.message(), fix));
    std::string tmpl = (base / "trainrun-report-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw Error(kExitWrite,
                  fmt::format("report: cannot create a temporary directory in {} ({}); {}",
                              base.string(), std::strerror(errno), fix));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& file) {
  std::ifstream f(file, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

}  // namespace

std::string write_report_plot(const std::string& run_dir, const std::string& out_arg) {
  report::require_run_dir(run_dir);
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
  const std::string out = report::output_path(
      run_dir, out_arg, "report.png",
      out_arg.empty() ? "draw the plot elsewhere with --out FILE.png" : "choose another --out");

  TempDir tmp;
  {
    std::ofstream f(tmp.path / "train.tsv");
    for (const auto& r : train)
      f << tsv(number(r, "step")) << '\t' << tsv(number(r, "loss")) << '\t' << tsv(number(r, "lr"))
        << '\t' << tsv(number(r, "tokens_per_sec")) << '\t' << tsv(number(r, "grad_norm")) << '\t'
        << tsv(number(r, "mfu")) << '\n';
    std::ofstream e(tmp.path / "eval.tsv");
    for (const auto& r : evals)
      e << tsv(number(r, "step")) << '\t' << tsv(number(r, "val_loss")) << '\n';
    std::ofstream g(tmp.path / "plot.gp");
    const report::RunConfig cfg = report::read_config(run_dir);
    g << "train = " << gp_string((tmp.path / "train.tsv").string()) << "\n"
      << "evals = " << gp_string((tmp.path / "eval.tsv").string()) << "\n"
      << "has_eval = " << (evals.empty() ? 0 : 1) << "\n"
      << "first_step = " << number(train.front(), "step") << "\n"
      << "last_step = " << number(train.back(), "step") << "\n"
      << "out = " << gp_string((tmp.path / "plot.png").string()) << "\n"
      << "title = " << gp_string(fmt::format("trainrun {}", cfg.name.empty() ? run_dir : cfg.name))
      << "\n"
      << marks_gp(report::interruptions(read_metrics_jsonl(run_dir, "event"))) << kPlotScript;
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
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(png))
    throw Error(kExitFailure,
                fmt::format("report: gnuplot failed drawing {}:\n{}", out, slurp(errors)));
  // Drawn in the temporary directory first: a failed plot never leaves a stale or partial file,
  // and the picture replaces whatever is at `out` (a link there too) without writing through it.
  replace_file(out, slurp(png));
  return out;
}

}  // namespace trainrun
