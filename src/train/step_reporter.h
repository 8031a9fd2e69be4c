// StepReporter: what the step loop tells the people watching a run. On rank 0, the rows of
// RUN_DIR/metrics.{h5,jsonl} (train, eval and event rows) and the console: a progress line with
// throughput, MFU and ETA, redrawn in place on a terminal. On every rank, every logging.every
// steps, the straggler check: each rank's median step and phase times are gathered, and rank 0
// names the ranks well slower than the others. With logging.prometheus_port, rank 0 also serves
// the latest of all this at /metrics (trainrun/obs/metrics_server.h), publishing a copy after each
// report, eval and event. MFU, the ETA and those medians are computed here and nowhere else.
//
// Thread safety: none; the step loop's thread only. Collectives: the constructor, and report()
// on steps that are multiples of logging.every; every rank makes the same calls.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "step_times.h"
#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"
#include "trainrun/obs/metrics.h"
#include "trainrun/obs/metrics_server.h"
#include "trainrun/obs/prometheus.h"
#include "trainrun/obs/stragglers.h"

namespace trainrun {

struct StepReporterConfig {
  std::string run_dir;
  int64_t total_steps = 0;
  int64_t log_every = 1;
  double straggler_margin = 0.2;
  bool console = false;  // this rank prints progress (rank 0)
  bool tty = false;      // ... onto a terminal, where the progress line redraws in place
  std::string run_name;
  int64_t restarts = 0;     // relaunches of this job so far
  int prometheus_port = 0;  // rank 0 serves /metrics on it; 0 = no endpoint
  std::string prometheus_address = "0.0.0.0";

  // The settings of experiment `exp` for a rank that prints (`console`) onto a terminal or not.
  static StepReporterConfig of(const Experiment& exp, bool console, bool tty, int64_t restarts);
};

// What MFU and tokens/s are measured against.
struct Throughput {
  double flops_per_step = 0;  // model FLOPs of one optimizer step over all ranks
  double peak_gflops = 0;     // one rank's sgemm peak (gemm_peak: measured or best seen here)
  std::string peak_source;    // where that peak came from, for the run's header
  int world = 1;
  int64_t tokens_per_step = 0;  // predicted tokens of one optimizer step over all ranks
  // Model FLOPs utilisation of a step that took `seconds`, as a fraction of all ranks' peak.
  double mfu(double seconds) const {
    return flops_per_step / seconds / (peak_gflops * 1e9 * world);
  }
  // For `model` predicting `tokens_per_step` tokens per step over `world` ranks, each with
  // `be`'s sgemm peak (measured once per machine and cached: gemm_peak).
  static Throughput of(const ModelConfig& model, Backend& be, int world, int64_t tokens_per_step);
};

// One optimizer step as reported: its agreed loss and norm, and where its time went.
struct StepSummary {
  double loss = 0, lr = 0, grad_norm = 0;
  StepTimes times;
  int64_t tokens_seen = 0;
};

// Seconds as "1h02m", "3m07s" or "42s"; "?" when not finite or negative.
std::string format_duration(double seconds);

// This rank's steps since the last straggler check, reduced to medians per phase, and the
// stall statistic over this window and the one before.
class StragglerWindow {
 public:
  void add(const StepTimes& t) { samples_.push_back(t); }
  // The upper median of each of step, work (step - comm), data, forward, backward, comm (waiting)
  // and optimizer time over the window (zeros when it is empty); stall_cost and stall_phase
  // over this window's and the previous window's steps. Then empties the window, keeping its
  // steps as the previous one.
  // Stalls: steps above the median by `margin` (logging.straggler_margin) and 10 ms.
  RankTiming take_medians(double margin);

 private:
  std::vector<StepTimes> samples_, previous_;
};

class StepReporter {
 public:
  // Collective: gathers every rank's host name for the straggler warnings. Rank 0 then starts
  // the metrics endpoint when configured (throws ConfigError when its port cannot be bound).
  StepReporter(StepReporterConfig cfg, Throughput tp, Communicator& comm);
  ~StepReporter();
  StepReporter(const StepReporter&) = delete;
  StepReporter& operator=(const StepReporter&) = delete;

  // Rank 0 (no-op elsewhere): opens the metrics files; keep_through_step as MetricsLog's.
  void open_metrics(int64_t keep_through_step);
  // After a rollback to `step`: drops the rows past it, when the files are open.
  void reopen_metrics(int64_t step);
  void flush();  // every row so far readable by another process (before a checkpoint, say)
  // The newest checkpoint, written or restored (the endpoint's checkpoint step, age and size).
  void checkpoint(int64_t step, const std::string& path);
  void event(int64_t step, MetricEvent e, const MetricRow& extra = {});
  // Runs just before the straggler check's collective (the watchdog marks it as such).
  void on_collective(std::function<void(int64_t step)> fn) { on_collective_ = std::move(fn); }

  // Every step that ran, bad or not: its times as the straggler check counts them.
  void record(const StepTimes& sample) { window_.add(sample); }
  // Every step that counts (not one undone by a rollback): its time feeds the ETA.
  void step_done(double seconds);
  // Every save's cost (the step loop's wait for it), reported with the next train row.
  void checkpoint_time(double seconds) { checkpoint_carry_ += seconds; }
  bool due(int64_t step) const;  // whether report() wants this step
  void report(int64_t step, const StepSummary& s);
  void eval(int64_t step, double val_loss);
  // Ends the console's redrawn line, before other output follows it.
  void end_line();
  // The console's closing lines of a run that finished (rank 0).
  void summary(int64_t step, double seconds, double final_loss, double entropy_rate) const;

  const Throughput& throughput() const { return tp_; }
  int metrics_port() const { return server_ ? server_->port() : 0; }  // 0: no endpoint
  double mfu(double seconds) const { return tp_.mfu(seconds); }
  double eta_seconds(int64_t step) const;
  // The console's line for a reported step whose MFU is `step_mfu`, at most `width` columns
  // (0: no limit): fields are dropped, least wanted first, until it fits (step and loss stay,
  // cut at the width if even they do not fit), so a terminal never wraps the redrawn line.
  std::string progress_line(int64_t step, const StepSummary& s, double step_mfu,
                            int width = 0) const;

 private:
  void append(const std::string& kind, const MetricRow& row);
  void check_stragglers(int64_t step);
  void live(int64_t step, const StepSummary& s, double step_mfu);
  void publish() {
    if (server_) server_->publish(live_);
  }

  StepReporterConfig cfg_;
  Throughput tp_;
  Communicator& comm_;
  std::vector<std::string> hosts_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  std::function<void(int64_t)> on_collective_;
  StragglerWindow window_;
  CollectiveWatch collectives_;    // rank 0: has the network slowed?
  bool collectives_slow_ = false;  // at the last check
  double ema_step_ = 0;            // seconds per step, for the ETA
  // Seconds of checkpointing since the last train row: saves fall outside the step, and not
  // every saving step is a logged one, so each row carries what was spent since the one before.
  double checkpoint_carry_ = 0;
  double last_val_loss_ = NAN;
  bool warned_mfu_ = false;  // an MFU above 100% is said once: the peak is wrong, not the run
  LiveMetrics live_;         // what the endpoint serves, as of the last publish()
  std::unique_ptr<MetricsServer> server_;  // rank 0 with logging.prometheus_port only
};

}  // namespace trainrun
