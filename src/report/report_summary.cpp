// summarize_run: the figures of `trainrun report`, from RUN_DIR/metrics.jsonl and config.yaml.
#include "report_summary.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/experiment.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/data/sample_stream.h"
#include "trainrun/model/model_spec.h"

namespace fs = std::filesystem;

namespace trainrun::report {
namespace {

std::optional<double> num(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const double* d = std::get_if<double>(&v)) return *d;
      return std::nullopt;
    }
  return std::nullopt;
}

double mean(const std::vector<MetricRow>& rows, const std::string& key) {
  double s = 0;
  int n = 0;
  for (const auto& r : rows) {
    const double v = number(r, key);
    if (std::isfinite(v)) {
      s += v;
      ++n;
    }
  }
  return n ? s / n : NAN;
}

std::string fmt_value(double v, const char* spec = "{:.4f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "n/a";
}

// Steps as "3, 7, 12" with at most `max` shown.
std::string step_list(const std::set<int64_t>& steps, size_t max = 10) {
  std::string s;
  size_t i = 0;
  for (int64_t st : steps) {
    if (i++ == max) return s + fmt::format(", ... ({} in all)", steps.size());
    s += fmt::format("{}{}", s.empty() ? "" : ", ", st);
  }
  return s;
}

using Lines = std::vector<SummaryLine>;

void add_losses(Lines& out, const std::vector<MetricRow>& train,
                const std::vector<MetricRow>& evals, double last_step) {
  out.push_back(
      {"train loss",
       fmt::format("{} at step {:.0f} (first logged {})", fmt_value(number(train.back(), "loss")),
                   last_step, fmt_value(number(train.front(), "loss"))),
       {}});
  if (evals.empty()) {
    out.push_back({"val loss", "no evaluations", {}});
    return;
  }
  const MetricRow* best = nullptr;
  for (const auto& r : evals)
    if (std::isfinite(number(r, "val_loss")) &&
        (!best || number(r, "val_loss") < number(*best, "val_loss")))
      best = &r;
  out.push_back(
      {"val loss",
       fmt::format("final {} (step {:.0f}), best {} (step {:.0f})",
                   fmt_value(number(evals.back(), "val_loss")), number(evals.back(), "step"),
                   best ? fmt_value(number(*best, "val_loss")) : "n/a",
                   best ? number(*best, "step") : NAN),
       {}});
}

void add_speed(Lines& out, const std::vector<MetricRow>& train, double last_step) {
  // Throughput over the last half: the first steps include warm-up and allocation.
  std::vector<MetricRow> late;
  for (const auto& r : train)
    if (number(r, "step") > last_step / 2) late.push_back(r);
  if (late.empty()) late = train;
  out.push_back({"throughput",
                 fmt::format("{} tokens/s, MFU {}% (mean of {} logged steps in {:.0f}..{:.0f})",
                             fmt_value(mean(late, "tokens_per_sec"), "{:.0f}"),
                             fmt_value(100 * mean(late, "mfu"), "{:.1f}"), late.size(),
                             number(late.front(), "step"), last_step),
                 {}});

  // Time per phase, over every logged step. The parts of a step (data, forward, backward, the
  // communication not hidden behind backward, optimizer) and what is left ("other") add up to
  // its step_time; the total communication overlaps backward and so has no share of its own.
  const double step_time = mean(train, "step_time");
  SummaryLine phases{"",
                     fmt::format("time per step {} ms (mean of {} logged steps); phases:",
                                 fmt_value(step_time * 1e3, "{:.2f}"), train.size()),
                     {}};
  auto line = [&](const char* label, double seconds, bool share) {
    phases.details.push_back(
        fmt::format("{:<32} {:>10} ms {:>6}{}", label, fmt_value(seconds * 1e3, "{:.2f}"),
                    share ? fmt_value(100 * seconds / step_time, "{:.1f}") : "", share ? "%" : ""));
  };
  const std::pair<const char*, const char*> parts[] = {{"t_data", "data"},
                                                       {"t_forward", "forward"},
                                                       {"t_backward", "backward"},
                                                       {"t_comm_exposed", "comm exposed"},
                                                       {"t_optimizer", "optimizer"}};
  double accounted = 0;
  for (const auto& [key, label] : parts) {
    const double m = mean(train, key);
    accounted += m;
    line(label, m, true);
  }
  line("other", step_time - accounted, true);
  line("comm total (overlaps backward)", mean(train, "t_comm"), false);
  // Saves happen between steps: each row's t_checkpoint is what was spent on them since the
  // row before, so their sum is the run's whole checkpoint cost, spread here over its steps.
  double saved = 0;
  for (const auto& r : train)
    if (std::isfinite(number(r, "t_checkpoint"))) saved += number(r, "t_checkpoint");
  const double steps = number(train.back(), "step");
  phases.details.push_back(fmt::format(
      "{:<32} {:>10} ms a step outside it ({} s in all over {:.0f} steps, +{}%)", "checkpoint",
      fmt_value(saved / steps * 1e3, "{:.2f}"), fmt_value(saved, "{:.2f}"), steps,
      fmt_value(100 * saved / steps / step_time, "{:.1f}")));
  out.push_back(std::move(phases));
}

// Restarts, stragglers, other events (loss spikes, rollbacks, ...) and bad steps.
void add_events(Lines& out, const std::vector<MetricRow>& train,
                const std::vector<MetricRow>& events) {
  SummaryLine restarts{"restarts", "", {}};
  std::map<std::string, std::pair<int, std::set<int64_t>>> stragglers;  // "rank R on H (phase)"
  std::set<std::string> straggler_ranks;
  std::set<int64_t> bad;
  std::map<std::string, std::set<int64_t>> other;
  for (const auto& r : events) {
    const std::string ev = text(r, "event");
    const auto step = static_cast<int64_t>(number(r, "step"));
    const std::optional<MetricEvent> known = enum_from_name<MetricEvent>(ev);
    if (known == MetricEvent::restart) {
      const std::string cause = text(r, "cause");
      restarts.details.push_back(
          fmt::format("at step {}{}{}", step, cause.empty() ? "" : ": ", cause));
    } else if (known == MetricEvent::straggler) {
      auto& e = stragglers[fmt::format("rank {} on {} (phase {})", text(r, "rank"), text(r, "host"),
                                       text(r, "phase"))];
      ++e.first;
      straggler_ranks.insert(text(r, "rank"));
      e.second.insert(step);
    } else if (known == MetricEvent::bad_step) {
      bad.insert(step);
    } else {
      other[ev.empty() ? "?" : ev].insert(step);
    }
  }
  for (const auto& r : train)
    if (!std::isfinite(number(r, "loss")) || !std::isfinite(number(r, "grad_norm")))
      bad.insert(static_cast<int64_t>(number(r, "step")));
  restarts.value = restarts.details.empty() ? "none" : fmt::format("{}", restarts.details.size());
  out.push_back(std::move(restarts));
  SummaryLine slow{"stragglers",
                   stragglers.empty() ? "none" : fmt::format("{} rank(s)", straggler_ranks.size()),
                   {}};
  for (const auto& [who, e] : stragglers)
    slow.details.push_back(
        fmt::format("{}: {} time(s), steps {}", who, e.first, step_list(e.second)));
  out.push_back(std::move(slow));
  for (const auto& [ev, steps] : other)
    out.push_back({ev, fmt::format("{} time(s), steps {}", steps.size(), step_list(steps)), {}});
  out.push_back({"bad steps",
                 bad.empty() ? "none" : fmt::format("{} (steps {})", bad.size(), step_list(bad)),
                 {}});
}

// A mixture's realised proportions: how many of the samples the run read, [0, step x
// batch_size), came from each source (the blend, mix_counts), beside the weights.
void add_mixture(Lines& out, const RunConfig& cfg, double last_step) {
  if (cfg.mix.empty() || cfg.batch_size <= 0) return;
  const auto samples = static_cast<int64_t>(last_step) * cfg.batch_size;
  std::vector<double> weights;
  double total = 0;
  for (const auto& m : cfg.mix) weights.push_back(m.weight), total += m.weight;
  const auto counts = mix_counts(weights, samples);
  SummaryLine line{
      "data mix", fmt::format("{} samples read from {} sources", samples, cfg.mix.size()), {}};
  for (size_t s = 0; s < cfg.mix.size(); ++s)
    line.details.push_back(
        fmt::format("{}: {} samples, {:.2f}% (weight {:.2f}%)", mix_source_name(cfg.mix[s]),
                    counts[s], samples > 0 ? 100.0 * double(counts[s]) / double(samples) : 0.0,
                    100.0 * cfg.mix[s].weight / total));
  out.push_back(std::move(line));
}

}  // namespace

double number(const MetricRow& row, const std::string& key) {
  return num(row, key).value_or(NAN);
}

std::string text(const MetricRow& row, const std::string& key) {
  for (const auto& [k, v] : row)
    if (k == key) {
      if (const auto* s = std::get_if<std::string>(&v)) return *s;
      if (const double* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
    }
  return "";
}

void require_run_dir(const std::string& run_dir) {
  // stat(2), not std::filesystem's throwing calls: a link loop or a folder without access is a
  // message naming the path, not an internal error.
  struct stat st {};
  if (::stat(run_dir.c_str(), &st) != 0 && errno != ENOENT && errno != ENOTDIR)
    throw ConfigError(fmt::format("report: cannot read {}: {}; give a run directory you can read",
                                  run_dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode))
    throw ConfigError(
        fmt::format("report: {} is not a directory: give a run directory "
                    "(runs/NAME, or the run's --run-dir)",
                    run_dir));
  const std::string metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  if (::stat(metrics.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw RunDirError(fmt::format("report: cannot read {}: {}", metrics, std::strerror(errno)));
    throw ConfigError(
        fmt::format("report: {}/metrics.jsonl is missing: is this a run directory? "
                    "(it appears once the first step is logged)",
                    run_dir));
  }
}

std::vector<std::pair<double, std::string>> interruptions(const std::vector<MetricRow>& events) {
  std::vector<std::pair<double, std::string>> out;
  for (const auto& r : events) {
    const std::string e = text(r, "event");
    const bool mark = e == enum_name(MetricEvent::restart) || e == enum_name(MetricEvent::rollback);
    if (mark && (out.empty() || out.back() != std::pair(number(r, "step"), e)))
      out.emplace_back(number(r, "step"), e);  // two rollbacks to one step: one mark
  }
  return out;
}

RunConfig read_config(const std::string& run_dir) {
  RunConfig c;
  const std::string path = (fs::path(run_dir) / "config.yaml").string();
  // The config a run wrote (to_yaml), a few KiB: 1 MiB is far above any, and far below what
  // would hold up the report.
  const FileRule rule{uint64_t{1} << 20, kExitRunDir,
                      "report reads the config.yaml its run wrote: put that back, or move this "
                      "one away to report without it"};
  const std::optional<std::string> text = read_regular_file(path, rule);
  if (!text) return c;
  // Read as a run reads a config, every key known and every rule kept: its values reach
  // gnuplot's script, the terminal and the page (a name is letters, digits, . _ - only).
  Experiment exp;
  try {
    exp = parse_experiment(*text, path, {});
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format(
        "report: {}\n(report reads a run's config.yaml as a run reads its config: fix it, or "
        "move it away to report without it)",
        e.what()));
  }
  c.name = exp.name;
  c.steps = exp.train.steps;
  c.batch_size = exp.train.batch_size;
  c.mix = exp.data.mix;
  c.summary =
      fmt::format("{} | {} rank(s) | device {}", model_spec(exp.model.type).describe(exp.model),
                  exp.world_size(), enum_name(exp.device));
  return c;
}

RunSummary summarize_run(const std::string& run_dir) {
  require_run_dir(run_dir);
  const RunConfig cfg = read_config(run_dir);
  const auto train = read_metrics_jsonl(run_dir, "train");
  const auto evals = read_metrics_jsonl(run_dir, "eval");
  const auto events = read_metrics_jsonl(run_dir, "event");

  RunSummary s{cfg.name.empty() ? "?" : cfg.name, cfg.summary, {}};
  const double last_step = train.empty() ? 0 : number(train.back(), "step");
  if (cfg.steps > 0)
    s.lines.push_back({"steps",
                       fmt::format("{:.0f} / {} ({:.0f}%)", last_step, cfg.steps,
                                   100.0 * last_step / static_cast<double>(cfg.steps)),
                       {}});
  else
    s.lines.push_back(
        {"steps", fmt::format("{:.0f} (total unknown: no config.yaml)", last_step), {}});
  if (train.empty()) {
    s.lines.push_back({"metrics", "no training rows logged yet", {}});
    return s;
  }
  s.lines.push_back(
      {"tokens", fmt::format("{:.0f} seen", number(train.back(), "tokens_seen")), {}});
  add_losses(s.lines, train, evals, last_step);
  add_speed(s.lines, train, last_step);
  add_events(s.lines, train, events);
  add_mixture(s.lines, cfg, last_step);
  return s;
}

}  // namespace trainrun::report
