// MetricsLog: RUN_DIR/metrics.h5 (one extendable dataset per metric) and RUN_DIR/metrics.jsonl
// (the same rows, one JSON object per line), and TensorBoard event files in RUN_DIR/tb unless
// the run's config.yaml sets logging.tensorboard: false (trainrun/obs/tensorboard.h). Rows are
// keyed by step; on resume every row past the checkpoint's step is dropped first, so no step
// appears twice.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "trainrun/core/enum_names.h"

namespace trainrun {

// Numbers go to both files; strings (an event's cause, a straggler's host) only to the JSONL.
using MetricValue = std::variant<double, std::string>;
using MetricRow = std::vector<std::pair<std::string, MetricValue>>;  // "step" first

// The events metrics.jsonl records (rows of kind "event", named by their "event" field). One
// name table: the writers (trainer, supervisor) and the readers (report, the endpoint's
// counters) cannot disagree on a spelling.
enum class MetricEvent : uint8_t {
  restart,             // the supervisor relaunched the job
  straggler,           // a rank named slow by the straggler check
  bad_step,            // a non-finite loss or gradient norm: the update skipped
  loss_spike,          // a loss far above the recent mean (a warning)
  rollback,            // back to the newest good checkpoint
  gave_up,             // the run ends non-finite
  checkpoint_skipped,  // a save refused (non-finite state, a bad streak)
  slow_collectives,    // every rank waits longer in the collectives: the network, not a rank
};

template <>
struct EnumNames<MetricEvent> {
  static constexpr std::string_view names[] = {
      "restart",  "straggler", "bad_step",           "loss_spike",
      "rollback", "gave_up",   "checkpoint_skipped", "slow_collectives"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(MetricEvent::slow_collectives));
};

// An event row's first fields, {"step", step}, {"event", its name}; the caller adds the rest.
inline MetricRow event_row(int64_t step, MetricEvent e) {
  return {{"step", static_cast<double>(step)}, {"event", std::string(enum_name(e))}};
}

class MetricsLog {
 public:
  // Opens (creating when absent) RUN_DIR/metrics.{h5,jsonl}. keep_through_step >= 0 drops rows
  // with step > keep_through_step (resume); < 0 starts both files empty.
  MetricsLog(const std::string& run_dir, int64_t keep_through_step);
  ~MetricsLog();
  // `kind` separates training rows ("train"), evaluations ("eval") and events ("event").
  void append(const std::string& kind, const MetricRow& row);
  void flush();  // both files readable by another process after this
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What a metrics field measures and its unit ("s", "nats per token"), as metrics.h5 labels its
// columns (attributes "units" and "description"); nullopt for a field without a fixed meaning
// (an event's extras).
struct FieldDoc {
  std::string_view units, description;
};
std::optional<FieldDoc> metric_field_doc(std::string_view field);

// Reads metrics.jsonl rows of one kind (for report, the supervisor and tests); none when there
// is no file. Throws Error(kExitRunDir) naming it when it is not a regular file or holds more
// than 4 GiB (core/regular_file.h): a FIFO or a link to /dev/zero never ends a read.
std::vector<MetricRow> read_metrics_jsonl(const std::string& run_dir, const std::string& kind);

// One row as one line of metrics.jsonl, {"kind":KIND,<fields in order>} (doubles round-trip,
// NaN and infinities as null), and back (nullopt unless a flat JSON object). Also the format of
// other flat records, such as the ranks' failure records.
std::string format_metrics_line(const std::string& kind, const MetricRow& row);
std::optional<MetricRow> parse_metrics_line(std::string_view line);

// s as a JSON string literal, quotes included (the one escaper for every JSON trainrun writes).
std::string json_quote(std::string_view s);

}  // namespace trainrun
