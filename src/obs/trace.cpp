// Tracer: Chrome trace event JSON (loadable in Perfetto / chrome://tracing) for a window of
// steps. Timestamps are steady-clock microseconds: CLOCK_MONOTONIC is shared by every process
// on a host, so the ranks of one node line up on one timeline.
#include "trainrun/obs/trace.h"
#include "trainrun/core/clock.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/core/thread_annotations.h"
#include "trainrun/obs/metrics.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {

struct Event {
  std::string name, cat;
  double ts, dur;  // microseconds
  int tid;
  int64_t step;  // the step it belongs to (numbered as the logs number them)
};

// "A:B" with whole numbers 0 <= A < B; anything else is a usage error naming the fix.
void parse_window(const std::string& s, int64_t* a, int64_t* b) {
  auto bad = [&s](const char* why) {
    return ConfigError(fmt::format(
        "--profile '{}': {}: expected A:B, whole steps with 0 <= A < B (e.g. --profile 20:25 "
        "traces steps 20 to 24)",
        s, why));
  };
  const size_t colon = s.find(':');
  if (colon == std::string::npos) throw bad("no ':'");
  auto number = [&](std::string_view part, int64_t* out) {
    if (part.empty() || part.front() == '-' || part.front() == '+') return false;
    const auto r = std::from_chars(part.data(), part.data() + part.size(), *out);
    return r.ec == std::errc() && r.ptr == part.data() + part.size();
  };
  const std::string_view sv(s);
  if (!number(sv.substr(0, colon), a) || !number(sv.substr(colon + 1), b))
    throw bad("A and B must be whole numbers");
  if (*a >= *b) throw bad("A must be smaller than B");
}

}  // namespace

struct Tracer::Impl {
  std::string path;
  int rank = 0;
  int64_t first = 0, end = 0;
  bool enabled = false;
  std::atomic<bool> on{false};
  std::atomic<int64_t> step{0};
  bool written = false;
  Mutex mu;  // the step loop's and the communication thread's spans
  std::vector<Event> events GUARDED_BY(mu);
  std::map<std::thread::id, int> tids GUARDED_BY(mu);  // 0: the tracer's maker; then 1, 2, ...
  std::map<std::string, int> tracks GUARDED_BY(mu);    // named rows: kFirstTrack, ...
  static constexpr int kFirstTrack = 1000;             // above any thread's row

  void record(const char* name, const char* cat, double t0, double t1,
              const char* track = nullptr) {
    MutexLock lock(mu);
    const int tid = track ? track_locked(track) : tid_locked();
    events.push_back(
        {name, cat, t0 * 1e6, (t1 - t0) * 1e6, tid, step.load(std::memory_order_relaxed)});
  }

  int track_locked(const std::string& name) REQUIRES(mu) {
    auto it = tracks.find(name);
    if (it != tracks.end()) return it->second;
    const int t = kFirstTrack + static_cast<int>(tracks.size());
    tracks.emplace(name, t);
    return t;
  }

  int tid_locked() REQUIRES(mu) {
    const auto id = std::this_thread::get_id();
    auto it = tids.find(id);
    if (it != tids.end()) return it->second;
    const int t = static_cast<int>(tids.size());
    tids.emplace(id, t);
    return t;
  }

  void write() REQUIRES(mu) {
    std::string out = "{\"traceEvents\":[\n";
    out += fmt::format(
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,"
        "\"args\":{{\"name\":\"rank {0}\"}}}},\n"
        "{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":0,"
        "\"args\":{{\"sort_index\":{0}}}}}",
        rank);
    for (const auto& [id, t] : tids)
      out += fmt::format(
          ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
          "\"args\":{{\"name\":\"{}\"}}}}",
          rank, t,
          t == 0   ? "main"
          : t == 1 ? "comm"
                   : fmt::format("thread {}", t));
    for (const auto& [name, t] : tracks)
      out += fmt::format(
          ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},"
          "\"args\":{{\"name\":{}}}}}",
          rank, t, json_quote(name));
    for (const Event& e : events)
      out += fmt::format(
          ",\n{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"ts\":{:.3f},\"dur\":{:.3f},"
          "\"pid\":{},\"tid\":{},\"args\":{{\"step\":{}}}}}",
          json_quote(e.name), json_quote(e.cat), e.ts, e.dur, rank, e.tid, e.step);
    out += "\n],\"displayTimeUnit\":\"ms\"}\n";
    fs::create_directories(fs::path(path).parent_path());
    trainrun::replace_file(path, out);
    write_op_table();
    written = true;
  }

  // Beside the timeline, the spans of category "op" (one per backend op, from the trainer's
  // op observer) summed per op name, per traced step: where a step's time goes, op by op.
  void write_op_table() const REQUIRES(mu) {
    std::map<std::string, std::pair<int64_t, double>> per_op;  // calls, microseconds
    double step_us = 0, op_us = 0;
    int64_t steps = 0;
    for (const Event& e : events) {
      if (e.cat == "step") {
        step_us += e.dur;
        ++steps;
      } else if (e.cat == "op") {
        auto& [calls, us] = per_op[e.name];
        ++calls;
        us += e.dur;
        op_us += e.dur;
      }
    }
    if (per_op.empty() || steps == 0) return;
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(per_op.begin(),
                                                                         per_op.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    const double n = static_cast<double>(steps);
    std::string out = fmt::format(
        "# trainrun --profile: time per backend op, rank {}, {} traced step(s), per step\n"
        "# (CPU: wall time; CUDA: device time between events around each op, no waiting)\n"
        "{:<26} {:>10} {:>10} {:>8}\n",
        rank, steps, "op", "calls", "ms", "% step");
    for (const auto& [name, cu] : rows)
      out += fmt::format("{:<26} {:>10.1f} {:>10.3f} {:>8.1f}\n", name,
                         static_cast<double>(cu.first) / n, cu.second / n / 1e3,
                         100 * cu.second / step_us);
    out += fmt::format("{:<26} {:>10} {:>10.3f} {:>8.1f}\n", "(outside ops)", "",
                       (step_us - op_us) / n / 1e3, 100 * (step_us - op_us) / step_us);
    out += fmt::format("{:<26} {:>10} {:>10.3f} {:>8.1f}\n", "step", "", step_us / n / 1e3, 100.0);
    replace_file((fs::path(path).parent_path() / fmt::format("ops-rank-{}.txt", rank)).string(),
                 out);
  }
};

Tracer::Tracer(const std::string& run_dir, int rank, const std::string& steps)
    : impl_(std::make_unique<Impl>()) {
  impl_->rank = rank;
  if (steps.empty()) return;
  parse_window(steps, &impl_->first, &impl_->end);
  impl_->enabled = true;
  impl_->path = (fs::path(run_dir) / "trace" / fmt::format("rank-{}.json", rank)).string();
  impl_->tid_locked();
}

Tracer::~Tracer() {
  try {
    if (impl_->enabled && !impl_->events.empty()) impl_->write();
  } catch (...) {
    // A destructor must not throw; flush() reports write errors to callers that care.
  }
}

void Tracer::set_step(int64_t step) {
  impl_->step.store(step, std::memory_order_relaxed);
  impl_->on.store(impl_->enabled && step >= impl_->first && step < impl_->end,
                  std::memory_order_relaxed);
}

bool Tracer::covers(int64_t from, int64_t to) const {
  return impl_->enabled && impl_->first < to && from < impl_->end;
}

std::string Tracer::window() const {
  return fmt::format("{}:{}", impl_->first, impl_->end);
}

bool Tracer::active() const {
  return impl_->on.load(std::memory_order_relaxed);
}

void Tracer::span(const char* name, const char* cat, double t0, double t1, const char* track) {
  if (active()) impl_->record(name, cat, t0, t1, track);
}

void Tracer::flush() {
  if (!impl_->enabled) return;
  MutexLock lock(impl_->mu);
  if (impl_->events.empty()) return;  // nothing traced: no empty file
  impl_->write();
}

std::string Tracer::written_file() const {
  return impl_->written ? impl_->path : "";
}

Tracer::Scope::Scope(Tracer* t, const char* name, const char* cat)
    : t_(t && t->active() ? t : nullptr), name_(name), cat_(cat), t0_(t_ ? trace_now() : 0) {}

Tracer::Scope::~Scope() {
  // Recorded even when the window closed meanwhile: the span started inside it.
  if (t_) t_->impl_->record(name_, cat_, t0_, trace_now());
}

double trace_now() {
  return now();
}

std::string merge_rank_traces(const std::string& trace_dir, int world) {
  nlohmann::json all = nlohmann::json::array();
  bool any = false;
  for (int r = 0; r < world; ++r) {
    const fs::path file = fs::path(trace_dir) / fmt::format("rank-{}.json", r);
    static constexpr FileRule kRule{4ull << 30, kExitRunDir,
                                    "move it out of the run directory's trace/ folder"};
    const std::optional<std::string> text = read_regular_file(file.string(), kRule);
    if (!text) continue;
    const nlohmann::json one = nlohmann::json::parse(*text, nullptr, false);
    if (!one.is_object() || !one.contains("traceEvents") || !one["traceEvents"].is_array())
      throw Error(kExitFailure,
                  fmt::format("cannot merge trace {}: not a Chrome trace", file.string()));
    for (const auto& e : one["traceEvents"]) all.push_back(e);
    any = true;
  }
  if (!any) return "";
  const std::string out = (fs::path(trace_dir) / "all-ranks.json").string();
  write_file_durably(
      out, nlohmann::json{{"traceEvents", std::move(all)}, {"displayTimeUnit", "ms"}}.dump());
  return out;
}

}  // namespace trainrun
