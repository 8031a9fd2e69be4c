// Report: `trainrun report RUN_DIR`: a summary of a run from its metrics and logs, and a plot of
// loss, val loss, lr and throughput against step (gnuplot, PNG); with --html also one
// self-contained page of the same (inline SVG plots, the summary, every event).
#pragma once

#include <string>

namespace trainrun {

// Everything is read from the run directory as a run reads it: config.yaml with every rule of a
// config (ConfigError, exit 2, naming the line), metrics.jsonl and config.yaml only when regular
// files within their size caps (Error(kExitRunDir), exit 73, otherwise). Its text may hold any
// byte (an event's cause, a path): print it through printable() (launch/run_command.h).
std::string report_text(const std::string& run_dir);
// Writes the picture (default RUN_DIR/report.png); returns its path. Throws Error when gnuplot
// is missing, naming the package to install, and Error(kExitWrite), exit 74, naming the path and
// the fix when it or gnuplot's temporary directory (under TMPDIR) cannot be written. The file is
// replaced whole by a rename: a link at its name is replaced, never written through.
std::string write_report_plot(const std::string& run_dir, const std::string& out = "");
// Writes the page (default RUN_DIR/report.html; no script and nothing fetched, so it opens from
// disk in any browser), by the same rules; returns its path. Throws ConfigError when run_dir is
// no run directory.
std::string write_report_html(const std::string& run_dir, const std::string& out = "");

}  // namespace trainrun
