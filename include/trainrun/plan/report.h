// Report: `trainrun report RUN_DIR`: a summary of a run from its metrics and logs, and a plot of
// loss, val loss, lr and throughput against step (gnuplot, PNG); with --html also one
// self-contained page of the same (inline SVG plots, the summary, every event).
#pragma once

#include <string>

namespace trainrun {

std::string report_text(const std::string& run_dir);
// Writes the picture (default RUN_DIR/report.png); returns its path. Throws Error when gnuplot
// is missing, naming the package to install.
std::string write_report_plot(const std::string& run_dir, const std::string& out = "");
// Writes the page (default RUN_DIR/report.html; no script and nothing fetched, so it opens from
// disk in any browser); returns its path. Throws ConfigError when run_dir is no run directory.
std::string write_report_html(const std::string& run_dir, const std::string& out = "");

}  // namespace trainrun
