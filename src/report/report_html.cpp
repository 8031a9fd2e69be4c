// write_report_html: `trainrun report RUN_DIR --html`, one self-contained page (inline SVG and
// CSS, no script, nothing fetched) with the curves, the summary and every event of the run.
#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "report_output.h"
#include "report_summary.h"
#include "svg_plot.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/report/report.h"

namespace trainrun {
namespace {

using report::html_escape;
using report::number;
using report::Series;

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 24px 0 8px; }
.sub { color: #555; margin: 0 0 16px; }
.plots { display: grid; grid-template-columns: repeat(2, 560px); gap: 12px; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #e4e4e4; padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.key { font-weight: 600; white-space: nowrap; }
pre { margin: 2px 0 0; font: 12px/1.35 ui-monospace, monospace; }
)CSS";

Series series(const std::vector<MetricRow>& rows, const std::string& key, std::string name,
              std::string color, double scale = 1) {
  Series s{std::move(name), std::move(color), {}, false};
  for (const auto& r : rows) s.points.emplace_back(number(r, "step"), scale * number(r, key));
  return s;
}

std::string plots(const std::vector<MetricRow>& train, const std::vector<MetricRow>& evals,
                  const std::vector<MetricRow>& events) {
  Series val = series(evals, "val_loss", "val", "#d62728");
  val.markers = true;
  const auto marks = report::interruptions(events);
  auto axes = [&marks](std::string y) {
    report::ChartAxes a;
    a.y_title = std::move(y);
    a.marks = marks;
    return a;
  };
  std::string s = "<div class=\"plots\">\n";
  s += report::svg_line_chart("loss", {series(train, "loss", "train", "#1f77b4"), val},
                              axes("loss (nats per token)"));
  s += report::svg_line_chart("learning rate", {series(train, "lr", "lr", "#2ca02c")},
                              axes("learning rate"));
  s += report::svg_line_chart("tokens/s", {series(train, "tokens_per_sec", "tokens/s", "#9467bd")},
                              axes("tokens per second"));
  s += report::svg_line_chart("grad norm", {series(train, "grad_norm", "grad norm", "#ff7f0e")},
                              axes("gradient L2 norm (before clipping)"));
  return s + "</div>\n";
}

std::string summary_table(const report::RunSummary& summary) {
  std::string s = "<table class=\"summary\">\n";
  for (const report::SummaryLine& l : summary.lines) {
    s += fmt::format("<tr><td class=\"key\">{}</td><td>{}", html_escape(l.key),
                     html_escape(l.value));
    if (!l.details.empty()) {
      s += "<pre>";
      for (const std::string& d : l.details) s += html_escape(d) + "\n";
      s += "</pre>";
    }
    s += "</td></tr>\n";
  }
  return s + "</table>\n";
}

// Every event row: its step, its name and its other fields.
std::string events_table(const std::vector<MetricRow>& events) {
  if (events.empty()) return "<p>No events (restarts, stragglers, rollbacks, bad steps).</p>\n";
  std::string s =
      "<table class=\"events\">\n<tr><th>step</th><th>event</th><th>details</th></tr>\n";
  for (const auto& r : events) {
    std::string details;
    for (const auto& [k, v] : r) {
      if (k == "step" || k == "event") continue;
      const double* d = std::get_if<double>(&v);
      details += fmt::format("{}{}: {}", details.empty() ? "" : ", ", k,
                             d ? fmt::format("{:.6g}", *d) : std::get<std::string>(v));
    }
    s += fmt::format("<tr><td>{:.0f}</td><td>{}</td><td>{}</td></tr>\n", number(r, "step"),
                     html_escape(report::text(r, "event")), html_escape(details));
  }
  return s + "</table>\n";
}

std::string page(const std::string& run_dir) {
  const report::RunSummary summary = report::summarize_run(run_dir);
  const auto train = read_metrics_jsonl(run_dir, "train");
  const auto evals = read_metrics_jsonl(run_dir, "eval");
  const auto events = read_metrics_jsonl(run_dir, "event");
  const std::time_t now = std::time(nullptr);
  char when[64] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>trainrun report: {0}</title>\n<style>{1}{8}</style>\n</head>\n<body>\n"
      "<h1>run {0}</h1>\n<p class=\"sub\">{2}{3}</p>\n{4}<h2>Summary</h2>\n{5}"
      "<h2>Events</h2>\n{6}<p class=\"sub\">written by trainrun report at {7}</p>\n"
      "</body>\n</html>\n",
      html_escape(summary.name), kStyle, html_escape(run_dir),
      summary.description.empty() ? "" : " | " + html_escape(summary.description),
      plots(train, evals, events), summary_table(summary), events_table(events), when,
      report::kSvgChartStyle);
}

}  // namespace

std::string write_report_html(const std::string& run_dir, const std::string& out_arg) {
  report::require_run_dir(run_dir);
  const std::string out =
      report::output_path(run_dir, out_arg, "report.html",
                          "copy the run directory somewhere writable and report on the copy");
  // Written beside the target and renamed: a browser reloading it never sees half a page, and a
  // link at the name is replaced, not written through.
  replace_file(out, page(run_dir));
  return out;
}

}  // namespace trainrun
