// LiveMetrics: the latest state of a run as the step loop last published it, and its rendering
// in the Prometheus text exposition format, version 0.0.4 (what every Prometheus since 2.0
// scrapes; no OpenMetrics), with a trainrun_ prefix and HELP/TYPE lines on every family.
//
// Counters (trainrun_*_total) count within one process and start at 0 in a relaunched one, which
// Prometheus's rate() and increase() read as a counter reset. Everything else is a gauge: the
// step and tokens seen go back on a rollback. A metric with no value yet (no eval, no checkpoint)
// is left out rather than written as NaN, so a Grafana panel shows a gap, not a fake point.
//
// Plain values, no locking: MetricsServer (metrics_server.h) copies one under its own mutex.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun {

// The phases of trainrun_step_phase_seconds{phase=...}, the names metrics.jsonl's t_* fields
// carry (t_comm: in collectives; t_comm_exposed: the part of it that was waiting).
inline constexpr int kLivePhaseCount = 7;
inline constexpr const char* kLivePhaseNames[kLivePhaseCount] = {
    "data", "forward", "backward", "comm", "comm_exposed", "optimizer", "checkpoint"};

struct LiveStraggler {
  int rank = 0;
  std::string host;
  bool flagged = false;  // named by the last straggler check
};

struct LiveMetrics {
  std::string run;  // the run's name, the label of trainrun_info
  int world = 1;
  int64_t total_steps = 0;
  bool reported = false;  // a train row was reported; the step metrics below hold one
  int64_t step = 0;
  double loss = NAN, lr = NAN, grad_norm = NAN, tokens_per_sec = NAN, mfu = NAN;
  double step_time = NAN;
  double phases[kLivePhaseCount] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
  int64_t tokens_seen = 0;
  int64_t val_step = -1;  // the step of val_loss; -1: no eval yet
  double val_loss = NAN;
  int64_t restarts = 0;  // relaunches of this job so far (the supervisor's or Slurm's count)
  int64_t bad_steps = 0, rollbacks = 0, loss_spikes = 0;  // in this process
  std::vector<LiveStraggler> stragglers;                  // every rank at the last check (2+ ranks)
  int64_t checkpoint_step = -1;  // the newest checkpoint written or restored; -1: none
  std::string checkpoint_path;
};

// What the exposition needs from the world at scrape time, measured by the caller (the server
// thread), so the step loop never stats a file.
struct CheckpointFile {
  bool exists = false;
  double size_bytes = 0;
  double age_seconds = 0;  // now minus the file's modification time
};

// The exposition of `m` (every line ends in '\n'). `ckpt`: the state of m.checkpoint_path now.
std::string prometheus_text(const LiveMetrics& m, const CheckpointFile& ckpt);

// A label value escaped as the format wants: backslash, double quote and newline.
std::string prometheus_label_value(std::string_view v);
// A sample value: shortest round-trip decimal, NaN, +Inf, -Inf.
std::string prometheus_number(double v);

}  // namespace trainrun
