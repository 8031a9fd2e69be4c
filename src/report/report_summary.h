// Internal to src/plan: what `trainrun report` says about a run, as data, so that the text
// report, the PNG plot and the HTML page read the run directory the same way and show the same
// figures.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/obs/metrics.h"

namespace trainrun::report {

// A field of a row as a number (NaN when absent or a string) or as text ("" when absent).
double number(const MetricRow& row, const std::string& key);
std::string text(const MetricRow& row, const std::string& key);

// Throws ConfigError unless run_dir is a directory holding metrics.jsonl.
void require_run_dir(const std::string& run_dir);

// From RUN_DIR/config.yaml, when there is one (else all unknown). Read as a run reads a config:
// throws ConfigError (exit 2) naming the file, line and key when a rule is broken, and
// Error(kExitRunDir) when it is not a regular file of at most 1 MiB (core/regular_file.h).
struct RunConfig {
  std::string name;
  int64_t steps = -1;          // train.steps; -1 unknown
  std::string summary;         // "gpt 1 layers d_model 32 ... | 2 rank(s) | device cpu"
  int64_t batch_size = 0;      // train.batch_size; 0 unknown
  std::vector<MixSource> mix;  // data.mix, empty for one source
};
RunConfig read_config(const std::string& run_dir);

// Where a run's curves were interrupted, for the plots to mark: its restart and rollback events
// as (step, event name), in order.
std::vector<std::pair<double, std::string>> interruptions(const std::vector<MetricRow>& events);

// One line of the summary: "key  value", then indented detail lines. An empty key is a line of
// its own ("time per step ...").
struct SummaryLine {
  std::string key;
  std::string value;
  std::vector<std::string> details;
};

struct RunSummary {
  std::string name;         // the run's name, "?" when unknown
  std::string description;  // RunConfig::summary
  std::vector<SummaryLine> lines;
};
RunSummary summarize_run(const std::string& run_dir);

}  // namespace trainrun::report
