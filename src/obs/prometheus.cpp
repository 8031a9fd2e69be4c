#include "trainrun/obs/prometheus.h"

#include <fmt/format.h>

namespace trainrun {

namespace {

// One metric family: its HELP and TYPE lines, then its samples.
class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    name_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(double v, const std::string& labels = {}) {
    out_ += fmt::format("{}{} {}\n", name_, labels, prometheus_number(v));
  }
  void sample(int64_t v) { out_ += fmt::format("{} {}\n", name_, v); }
  // A family of one sample.
  void gauge(const char* name, const char* help, double v) {
    family(name, "gauge", help);
    sample(v);
  }
  void counter(const char* name, const char* help, int64_t v) {
    family(name, "counter", help);
    sample(v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  const char* name_ = "";
};

void step_metrics(Exposition& e, const LiveMetrics& m) {
  e.gauge("trainrun_step", "The last reported optimizer step (goes back on a rollback).",
          double(m.step));
  e.gauge("trainrun_loss", "Training loss at the last reported step (nats per token).", m.loss);
  e.gauge("trainrun_learning_rate", "Learning rate at the last reported step.", m.lr);
  e.gauge("trainrun_grad_norm", "Global gradient norm before clipping at the last reported step.",
          m.grad_norm);
  e.gauge("trainrun_tokens_per_second", "Training tokens per second over all ranks.",
          m.tokens_per_sec);
  e.gauge("trainrun_mfu_ratio", "Model FLOPs utilisation: a fraction of all ranks' sgemm peak.",
          m.mfu);
  e.gauge("trainrun_step_seconds", "Wall time of the last reported step.", m.step_time);
  e.family("trainrun_step_phase_seconds", "gauge",
           "Rank 0's time in each phase of the last reported step.");
  for (int p = 0; p < kLivePhaseCount; ++p)
    e.sample(m.phases[p], fmt::format("{{phase=\"{}\"}}", kLivePhaseNames[p]));
  e.gauge("trainrun_tokens_seen", "Training tokens consumed so far (goes back on a rollback).",
          double(m.tokens_seen));
}

void health_metrics(Exposition& e, const LiveMetrics& m) {
  e.counter("trainrun_restarts_total", "Relaunches of this job after a failure.", m.restarts);
  e.counter("trainrun_bad_steps_total",
            "Steps skipped for a non-finite loss or gradient norm by this process.", m.bad_steps);
  e.counter("trainrun_rollbacks_total", "Rollbacks to the last good checkpoint by this process.",
            m.rollbacks);
  e.counter("trainrun_loss_spikes_total", "Loss spikes warned about by this process.",
            m.loss_spikes);
  if (m.stragglers.empty()) return;
  e.family("trainrun_straggler", "gauge",
           "1 when the last straggler check named the rank, else 0.");
  for (const LiveStraggler& s : m.stragglers)
    e.sample(s.flagged ? 1.0 : 0.0,
             fmt::format("{{rank=\"{}\",host=\"{}\"}}", s.rank, prometheus_label_value(s.host)));
}

void checkpoint_metrics(Exposition& e, const LiveMetrics& m, const CheckpointFile& ckpt) {
  if (m.checkpoint_step < 0) return;
  e.gauge("trainrun_checkpoint_step", "Step of the newest checkpoint written or restored.",
          double(m.checkpoint_step));
  if (!ckpt.exists) return;  // an async checkpoint still being written
  e.gauge("trainrun_checkpoint_age_seconds", "Seconds since the newest checkpoint was written.",
          ckpt.age_seconds);
  e.gauge("trainrun_checkpoint_size_bytes", "Size of the newest checkpoint (all its files).",
          ckpt.size_bytes);
}

}  // namespace

std::string prometheus_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

std::string prometheus_text(const LiveMetrics& m, const CheckpointFile& ckpt) {
  Exposition e;
  e.family("trainrun_info", "gauge", "The run this endpoint serves; always 1.");
  e.sample(1.0, fmt::format("{{run=\"{}\"}}", prometheus_label_value(m.run)));
  e.gauge("trainrun_world_size", "Ranks in the job.", double(m.world));
  e.gauge("trainrun_total_steps", "Optimizer steps the run is configured for (train.steps).",
          double(m.total_steps));
  if (m.reported) step_metrics(e, m);
  if (m.val_step >= 0) {
    e.gauge("trainrun_val_loss", "Validation loss at the last evaluation.", m.val_loss);
    e.gauge("trainrun_val_step", "Step of the last evaluation.", double(m.val_step));
  }
  health_metrics(e, m);
  checkpoint_metrics(e, m, ckpt);
  return e.take();
}

}  // namespace trainrun
