// `trainrun compare RUN_OR_SWEEP...`: one table of runs, with only the config keys that differ
// between them, each run's status and its figures read from its run directory (metrics.jsonl,
// config.yaml), as `report` reads them. A sweep directory stands for its points, in order.
// Runs that are still going are read as they are (status live).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

enum class CompareFormat : uint8_t { table, json, csv };

struct CompareOptions {
  // A figure's name (kCompareMetrics): rows best first by it (losses and time ascending,
  // throughput, MFU and steps descending); "" keeps the order given.
  std::string sort;
  // Runs that differ only in `seed` form one row: each figure's mean and standard error (the
  // sample standard deviation over sqrt(n)), n shown.
  bool group_seeds = false;
  CompareFormat format = CompareFormat::table;
};

// The figures, in column order: steps done, the last train loss, the best and the last val
// loss, mean tokens/s and MFU (the first logged step, which holds the warm-up, left out when
// there are more), and the steps' wall time in seconds.
inline constexpr const char* kCompareMetrics[] = {
    "steps", "train_loss", "best_val_loss", "last_val_loss", "tokens_per_sec", "mfu", "seconds"};

// A run's figures from its metrics.jsonl, in kCompareMetrics' order (NaN where it has none).
std::array<double, std::size(kCompareMetrics)> run_figures(const std::string& run_dir);

// Each path is a run directory, a sweep directory, or a directory whose subdirectories are
// runs. Throws ConfigError (exit 2) when a path holds no run or --sort names no figure, and
// Error(kExitRunDir) (exit 73) for a run directory's unreadable file, as `report` does.
std::string compare_runs(const std::vector<std::string>& paths, const CompareOptions& opt);

// The same runs as one self-contained HTML page (inline SVG and CSS, no script, nothing
// fetched): the table, then every run's curves overlaid per metric (train loss, val loss,
// learning rate, tokens/s), one colour per run, the legend naming each run by its directory and
// the keys that differ. Every name and value is escaped. Written by replace_file (a link at
// `out` is replaced, never followed); the caller checks `out` first (data/output_files.h).
void write_compare_html(const std::vector<std::string>& paths, const CompareOptions& opt,
                        const std::string& out);

}  // namespace trainrun
