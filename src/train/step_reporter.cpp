#include "step_reporter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string_view>

#include "trainrun/model/flops.h"

namespace trainrun {

Throughput Throughput::of(const ModelConfig& model, Backend& be, int world,
                          int64_t tokens_per_step) {
  Throughput tp;
  const GemmPeak peak = gemm_peak(be, 1024, default_gemm_peak_cache());
  tp.peak_gflops = peak.gflops;
  tp.peak_source = peak.source;
  tp.flops_per_step = train_flops_per_token(model) * static_cast<double>(tokens_per_step);
  tp.world = world;
  tp.tokens_per_step = tokens_per_step;
  return tp;
}

StepReporterConfig StepReporterConfig::of(const Experiment& exp, bool console, bool tty,
                                          int64_t restarts) {
  StepReporterConfig cfg;
  cfg.run_dir = exp.run_dir;
  cfg.total_steps = exp.train.steps;
  cfg.log_every = exp.logging.every;
  cfg.straggler_margin = exp.logging.straggler_margin;
  cfg.console = console;
  cfg.tty = tty;
  cfg.run_name = exp.name;
  cfg.restarts = restarts;
  cfg.prometheus_port = exp.logging.prometheus_port;
  cfg.prometheus_address = exp.logging.prometheus_address;
  return cfg;
}

namespace {

// stderr's terminal width; $COLUMNS, else 80, when the terminal does not say.
int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  return 80;
}

// A phase of kPhaseNames as StepTimes holds it. "comm" is the time blocked in collectives, so
// that a rank's own work is its step time minus it.
double phase_seconds(const StepTimes& t, std::string_view phase) {
  if (phase == "data") return t.data;
  if (phase == "forward") return t.forward;
  if (phase == "backward") return t.backward;
  if (phase == "comm") return t.comm_wait;
  if (phase == "optimizer") return t.optimizer;
  throw std::logic_error(fmt::format("stragglers: no step time for phase {}", phase));
}

template <class F>
double upper_median(const std::vector<StepTimes>& samples, F seconds) {
  std::vector<double> v;
  v.reserve(samples.size());
  for (const StepTimes& s : samples) v.push_back(seconds(s));
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

double work_seconds(const StepTimes& t) {
  return t.total - t.comm_wait;
}

// Where the stall time of `steps` went, as RankTiming::stall_phase: of data, forward, backward,
// optimizer and the time outside every phase, the one whose time above its own median, summed
// over the stalled steps (stalled_steps), is largest.
int stall_phase(const std::vector<StepTimes>& steps, const std::vector<bool>& stalled) {
  if (std::find(stalled.begin(), stalled.end(), true) == stalled.end()) return kPhaseCount;
  auto excess = [&](auto seconds) {
    const double median = upper_median(steps, seconds);
    double sum = 0;
    for (size_t i = 0; i < steps.size(); ++i)
      if (stalled[i]) sum += seconds(steps[i]) - median;
    return sum;
  };
  int best = kPhaseCount;
  double worst = excess([](const StepTimes& t) {
    double rest = t.total;
    for (const char* p : kPhaseNames) rest -= phase_seconds(t, p);
    return rest;
  });
  for (int p = 0; p < kPhaseCount; ++p) {
    if (std::string_view(kPhaseNames[p]) == "comm") continue;
    const double e = excess([p](const StepTimes& t) { return phase_seconds(t, kPhaseNames[p]); });
    if (e > worst) worst = e, best = p;
  }
  return best;
}

// One rank's figures on the wire: step, work, stall_cost, stall_phase, then each phase's
// median in kPhaseNames order.
constexpr int kTimingDoubles = 4 + kPhaseCount;
constexpr size_t kHostBytes = 64;  // host names are cut to 63 characters

}  // namespace

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

RankTiming StragglerWindow::take_medians(double margin) {
  RankTiming r;
  if (!samples_.empty()) {
    r.step = upper_median(samples_, [](const StepTimes& t) { return t.total; });
    // Per step, not median(step) - median(comm): when the link slows mid-window, the two medians
    // can come from different steps, and one step with a stall outside collectives then shifts
    // the difference by up to that stall (a CI run named a rank a straggler that way).
    r.work = upper_median(samples_, work_seconds);
    for (int p = 0; p < kPhaseCount; ++p)
      r.phases[p] = upper_median(
          samples_, [p](const StepTimes& t) { return phase_seconds(t, kPhaseNames[p]); });
  }
  // Stalls over two windows (stragglers.cpp says why): one is a hiccup, a second counts.
  std::vector<StepTimes> pool = previous_;
  pool.insert(pool.end(), samples_.begin(), samples_.end());
  std::vector<double> work;
  for (const StepTimes& t : pool) work.push_back(work_seconds(t));
  r.stall_cost = stall_cost(work, margin);
  r.stall_phase = stall_phase(pool, stalled_steps(work, margin));
  previous_ = std::move(samples_);
  samples_.clear();
  return r;
}

StepReporter::StepReporter(StepReporterConfig cfg, Throughput tp, Communicator& comm)
    : cfg_(std::move(cfg)), tp_(tp), comm_(comm) {
  char mine[kHostBytes] = {};
  comm_.host().copy(mine, kHostBytes - 1);
  std::vector<char> all(kHostBytes * static_cast<size_t>(comm_.size()));
  comm_.all_gather_bytes(mine, kHostBytes, all.data());
  for (int r = 0; r < comm_.size(); ++r)
    hosts_.emplace_back(all.data() + kHostBytes * static_cast<size_t>(r));
  live_.run = cfg_.run_name;
  live_.world = comm_.size();
  live_.total_steps = cfg_.total_steps;
  live_.restarts = cfg_.restarts;
  if (comm_.rank() != 0 || cfg_.prometheus_port == 0) return;
  server_ = MetricsServer::start(cfg_.prometheus_address, cfg_.prometheus_port);
  publish();
  spdlog::info("metrics for Prometheus: {}", server_->address_text(hosts_[0]));
}

StepReporter::~StepReporter() = default;

void StepReporter::open_metrics(int64_t keep_through_step) {
  if (comm_.rank() == 0) metrics_ = std::make_unique<MetricsLog>(cfg_.run_dir, keep_through_step);
}

void StepReporter::reopen_metrics(int64_t step) {
  if (metrics_) metrics_ = std::make_unique<MetricsLog>(cfg_.run_dir, step);
}

void StepReporter::flush() {
  if (metrics_) metrics_->flush();
}

void StepReporter::append(const std::string& kind, const MetricRow& row) {
  if (!metrics_) return;
  metrics_->append(kind, row);
  metrics_->flush();
}

void StepReporter::checkpoint(int64_t step, const std::string& path) {
  live_.checkpoint_step = step;
  live_.checkpoint_path = path;
  publish();
}

void StepReporter::event(int64_t step, MetricEvent e, const MetricRow& extra) {
  if (e == MetricEvent::bad_step) ++live_.bad_steps;
  if (e == MetricEvent::rollback) ++live_.rollbacks;
  if (e == MetricEvent::loss_spike) ++live_.loss_spikes;
  publish();
  if (!metrics_) return;
  MetricRow row = event_row(step, e);
  row.insert(row.end(), extra.begin(), extra.end());
  append("event", row);
}

void StepReporter::step_done(double seconds) {
  ema_step_ = ema_step_ == 0 ? seconds : 0.9 * ema_step_ + 0.1 * seconds;
}

double StepReporter::eta_seconds(int64_t step) const {
  return ema_step_ * static_cast<double>(cfg_.total_steps - step);
}

bool StepReporter::due(int64_t step) const {
  return step % cfg_.log_every == 0 || step == cfg_.total_steps || step == 1;
}

std::string StepReporter::progress_line(int64_t step, const StepSummary& s, double step_mfu,
                                        int width) const {
  const double secs = s.times.total;
  // In display order, each with its rank: the highest rank is dropped first.
  const std::pair<int, std::string> fields[] = {
      {0, fmt::format("step {}/{}", step, cfg_.total_steps)},
      {0, fmt::format("loss {:.4f}", s.loss)},
      {4, fmt::format("lr {:.2e}", s.lr)},
      {6, fmt::format("norm {:.3f}", s.grad_norm)},
      {3, fmt::format("{:.0f} tok/s", tp_.tokens_per_step / secs)},
      {5, fmt::format("MFU {:.1f}%", 100.0 * step_mfu)},
      {2, fmt::format("{:.0f} ms/step", secs * 1e3)},
      {1, fmt::format("ETA {}", format_duration(eta_seconds(step)))}};
  auto join = [&](int max_rank) {
    std::string line;
    for (const auto& [rank, text] : fields)
      if (rank <= max_rank) line += (line.empty() ? "" : " | ") + text;
    return line;
  };
  std::string line = join(6);
  for (int max_rank = 5; width > 0 && line.size() > static_cast<size_t>(width) && max_rank >= 0;
       --max_rank)
    line = join(max_rank);
  if (width > 0 && line.size() > static_cast<size_t>(width)) line.resize(width);
  return line;
}

// The endpoint's step metrics: the same figures as the train row.
void StepReporter::live(int64_t step, const StepSummary& s, double step_mfu) {
  const StepTimes& t = s.times;
  live_.reported = true;
  live_.step = step;
  live_.loss = s.loss;
  live_.lr = s.lr;
  live_.grad_norm = s.grad_norm;
  live_.tokens_per_sec = static_cast<double>(tp_.tokens_per_step) / t.total;
  live_.mfu = step_mfu;
  live_.step_time = t.total;
  const double phases[kLivePhaseCount] = {t.data,      t.forward,   t.backward,       t.comm_total,
                                          t.comm_wait, t.optimizer, checkpoint_carry_};
  std::copy(std::begin(phases), std::end(phases), live_.phases);
  live_.tokens_seen = s.tokens_seen;
  publish();
}

void StepReporter::report(int64_t step, const StepSummary& s) {
  const StepTimes& t = s.times;
  const double step_mfu = mfu(t.total);
  const double hidden = t.comm_total > 0 ? std::max(0.0, 1.0 - t.comm_wait / t.comm_total) : 0.0;
  live(step, s, step_mfu);
  append("train", {{"step", double(step)},
                   {"loss", s.loss},
                   {"lr", s.lr},
                   {"grad_norm", s.grad_norm},
                   {"tokens_per_sec", static_cast<double>(tp_.tokens_per_step) / t.total},
                   {"mfu", step_mfu},
                   {"step_time", t.total},
                   {"t_data", t.data},
                   {"t_forward", t.forward},
                   {"t_backward", t.backward},
                   {"t_comm", t.comm_total},
                   {"t_comm_exposed", t.comm_wait},
                   {"comm_hidden", hidden},
                   {"t_optimizer", t.optimizer},
                   {"t_checkpoint", checkpoint_carry_},
                   {"tokens_seen", double(s.tokens_seen)}});
  checkpoint_carry_ = 0;
  if (step % cfg_.log_every == 0) check_stragglers(step);
  if (!cfg_.console) return;
  if (step_mfu > 1.0 && !warned_mfu_) {
    warned_mfu_ = true;
    spdlog::warn(
        "MFU {:.0f}% is above 100%: the sgemm peak it divides by ({:.1f} GFLOP/s, {}) is too low, "
        "most likely measured while the machine was busy; MFU figures of this run read high",
        100.0 * step_mfu, tp_.peak_gflops, tp_.peak_source);
  }
  // On a terminal the line is redrawn in place: one column short of its width (read at every
  // line, so a resize takes effect at once), since a full-width line wraps on some terminals.
  const std::string line = progress_line(step, s, step_mfu, cfg_.tty ? terminal_columns() - 1 : 0);
  if (cfg_.tty) {
    fmt::print(stderr, "\r\033[K{}", line);
    std::fflush(stderr);
  } else {
    spdlog::info("{}", line);
  }
}

void StepReporter::eval(int64_t step, double val_loss) {
  last_val_loss_ = val_loss;
  live_.val_step = step;
  live_.val_loss = val_loss;
  publish();
  append("eval", {{"step", double(step)}, {"val_loss", val_loss}});
  if (!cfg_.console) return;
  if (cfg_.tty) fmt::print(stderr, "\r\033[K");
  spdlog::info("step {}/{} | val loss {:.4f}", step, cfg_.total_steps, val_loss);
}

void StepReporter::end_line() {
  if (cfg_.tty) fmt::print(stderr, "\n");
}

void StepReporter::summary(int64_t step, double seconds, double final_loss,
                           double entropy_rate) const {
  if (!cfg_.console) return;
  const bool evaluated = std::isfinite(last_val_loss_);
  spdlog::info("done: {} steps in {} | final train loss {:.4f}{}", step, format_duration(seconds),
               final_loss, evaluated ? fmt::format(" | val loss {:.4f}", last_val_loss_) : "");
  if (std::isfinite(entropy_rate)) {
    // The loss is measured on a finite sample, so it can land a little below the rate.
    const double gap = (evaluated ? last_val_loss_ : final_loss) - entropy_rate;
    spdlog::info("best possible loss on this data is {:.4f} nats/token: {:.4f} {} it ({} loss)",
                 entropy_rate, std::abs(gap), gap < 0 ? "below" : "above",
                 evaluated ? "val" : "train");
  }
  spdlog::info("run directory: {}", std::filesystem::absolute(cfg_.run_dir).string());
}

// Every rank's medians over the window are gathered; rank 0 names the ranks whose time outside
// collectives is well above the others'.
void StepReporter::check_stragglers(int64_t step) {
  const RankTiming mine = window_.take_medians(cfg_.straggler_margin);
  const int world = comm_.size();
  if (world < 2) return;
  if (on_collective_) on_collective_(step);
  double wire[kTimingDoubles] = {mine.step, mine.work, mine.stall_cost, double(mine.stall_phase)};
  std::copy(std::begin(mine.phases), std::end(mine.phases), wire + 4);
  std::vector<double> all(static_cast<size_t>(kTimingDoubles * world));
  comm_.all_gather_doubles(wire, kTimingDoubles, all.data());
  if (comm_.rank() != 0) return;
  std::vector<RankTiming> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    RankTiming& x = ranks[static_cast<size_t>(r)];
    const double* w = all.data() + static_cast<size_t>(kTimingDoubles * r);
    x.rank = r;
    x.host = hosts_[static_cast<size_t>(r)];
    x.step = w[0];
    x.work = w[1];
    x.stall_cost = w[2];
    x.stall_phase = static_cast<int>(w[3]);
    std::copy(w + 4, w + kTimingDoubles, x.phases);
  }
  const std::vector<Straggler> named = find_stragglers(ranks, cfg_.straggler_margin);
  live_.stragglers.assign(static_cast<size_t>(world), {});
  for (int r = 0; r < world; ++r)
    live_.stragglers[static_cast<size_t>(r)] = {r, hosts_[static_cast<size_t>(r)], false};
  for (const Straggler& s : named) live_.stragglers[static_cast<size_t>(s.rank)].flagged = true;
  publish();
  for (const Straggler& s : named) {
    spdlog::warn(
        "straggler: rank {} on {} takes {:.1f} ms per step outside collectives{}, {:.0f}% "
        "above the other ranks' median {:.1f} ms (mostly {})",
        s.rank, s.host, s.step * 1e3,
        s.stalls ? " on average, in frequent stalls over the last 2 checks' steps" : "",
        100 * (s.step / s.median - 1), s.median * 1e3, s.phase);
    event(step, MetricEvent::straggler,
          {{"rank", double(s.rank)},
           {"host", s.host},
           {"phase", s.phase},
           {"step_time", s.step},
           {"median", s.median}});
  }
  const auto slow = collectives_.check(ranks, cfg_.straggler_margin);
  const bool was_slow = collectives_slow_;
  if (!slow && was_slow)
    spdlog::info("slow collectives: the ranks' waits in collectives are back to normal");
  collectives_slow_ = slow.has_value();
  if (slow) {
    // Said at every check it lasts (metrics events) and in the log when it starts.
    const std::set<std::string> hosts(hosts_.begin(), hosts_.end());
    const std::string where = hosts.size() == 1
                                  ? fmt::format("within host {}", *hosts.begin())
                                  : fmt::format("between hosts {}", fmt::join(hosts, ", "));
    if (!was_slow)
      spdlog::warn(
          "slow collectives: every rank waits at least {:.1f} ms per step in collectives, "
          "against {:.1f} ms at the earlier checks: the network {} has slowed, not a rank",
          slow->least_wait * 1e3, slow->baseline * 1e3, where);
    event(step, MetricEvent::slow_collectives,
          {{"least_wait", slow->least_wait},
           {"baseline", slow->baseline},
           {"hosts", fmt::format("{}", fmt::join(hosts, ","))}});
  }
}

}  // namespace trainrun
