#include "watchdog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"
#include "trainrun/core/regular_file.h"
#include "trainrun/runtime/failure_record.h"
#include "trainrun/runtime/heartbeats.h"

namespace fs = std::filesystem;

namespace trainrun {

namespace {
// A heartbeat older than this marks its rank silent. Heartbeats come every 0.5 s; the margin
// covers clock skew between hosts and a shared file system's attribute caching.
constexpr double kSilentAfter = 10.0;

// Heartbeat files carry wall time: other hosts read them, and steady clocks are per host.
double wall() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

Watchdog::Watchdog(Communicator& comm, std::string run_dir, double timeout)
    : comm_(comm), run_dir_(std::move(run_dir)), fixed_timeout_(timeout) {
  since_ = now();
  fs::create_directories(fs::path(run_dir_) / "logs");
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::error_code ec;
  fs::remove(heartbeat_path(run_dir_, comm_.rank()), ec);
}

void Watchdog::enter(Phase phase, int64_t step) {
  phase_.store(phase, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  since_.store(now(), std::memory_order_release);
  note_phase(phase_name(phase), step);  // for this rank's failure record, should it fail
}

void Watchdog::wait_in_collective(bool waiting) {
  const int64_t step = step_.load(std::memory_order_relaxed);
  if (waiting) {
    resume_ = phase();
    enter(Phase::comm, step);
  } else {
    enter(resume_, step);
  }
}

void Watchdog::step_done(double seconds) {
  const double e = step_ema_.load();
  step_ema_.store(e == 0 ? seconds : 0.9 * e + 0.1 * seconds);
}

double Watchdog::timeout() const {
  if (fixed_timeout_ > 0) return fixed_timeout_;
  const double e = step_ema_.load();
  return e == 0 ? 600.0 : std::max(30.0, 20.0 * e);
}

void Watchdog::write_heartbeat() {
  const fs::path dir = fs::path(run_dir_) / "logs";
  const fs::path final_path = heartbeat_path(run_dir_, comm_.rank());
  try {
    replace_file(
        final_path.string(),
        fmt::format("{} {} {} {:.3f} {:.3f}\n{}\n", comm_.rank(), comm_.host(), step_.load(),
                    wall(), now() - since_.load(), phase_name(phase_.load())));
  } catch (const Error&) {
    // A heartbeat that cannot be written (a full disk) is a missed beat; the watchdog's own
    // verdicts do not depend on it.
  }
}

void Watchdog::loop() {
  double last_beat = 0;
  MutexLock lock(mu_);
  while (!stop_) {
    cv_.wait_until(mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
    if (stop_) break;
    const double t = now();
    if (t - last_beat > 0.5) {
      write_heartbeat();
      last_beat = t;
    }
    double limit = timeout();
    if (may_take_long(phase_.load())) limit = std::max(limit, 600.0);
    const double stuck = t - since_.load(std::memory_order_acquire);
    if (stuck > limit) fire(stuck);
  }
}

void Watchdog::fire(double stuck_for) {
  write_heartbeat();
  const int64_t my_step = step_.load();
  // Every rank's last heartbeat: ranks waiting in a collective at our step arrived; the others
  // (computing, or behind) did not.
  std::vector<std::string> arrived, missing, dump;
  int culprit = -1;  // the first rank that did not arrive, for the failure record
  std::string culprit_host;
  std::map<std::string, std::string> silent_hosts;  // host -> its silent ranks
  for (int r = 0; r < comm_.size(); ++r) {
    // A regular file of a few dozen bytes, as the ranks write it: anything else planted there
    // (a FIFO would block the watchdog itself) reads as no heartbeat.
    std::istringstream f;
    try {
      static constexpr FileRule kRule{4096, kExitRunDir, "remove it"};
      f.str(read_regular_file(heartbeat_path(run_dir_, r), kRule).value_or(""));
    } catch (const Error&) {
    }
    int rank = -1;
    std::string host, phase;
    int64_t step = -1;
    double wall_time = 0, in_phase = 0;
    if (!(f >> rank >> host >> step >> wall_time >> in_phase >> phase)) {
      missing.push_back(fmt::format("{} (no heartbeat)", r));
      dump.push_back(fmt::format("rank {}: no heartbeat file", r));
      if (culprit < 0) culprit = r;
      continue;
    }
    const double age = wall() - wall_time;
    dump.push_back(
        fmt::format("rank {} on {}: step {} phase {} for {:.1f} s (heartbeat {:.1f} s ago)", r,
                    host, step, phase, in_phase + age, age));
    const auto known = enum_from_name<Phase>(phase);
    if (age > kSilentAfter) {
      // Its watchdog thread writes every 0.5 s whatever the step does: the process, its host
      // or the link to it (a shared run directory) has gone silent.
      missing.push_back(
          fmt::format("{} on {} (silent: last heartbeat {:.0f} s ago)", r, host, age));
      auto& ranks = silent_hosts[host];
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      if (culprit < 0) {
        culprit = r;
        culprit_host = host;
      }
    } else if (step == my_step && known && collective(*known)) {
      arrived.push_back(std::to_string(r));
    } else {
      missing.push_back(fmt::format("{} on {} (step {}, {})", r, host, step, phase));
      if (culprit < 0) {
        culprit = r;
        culprit_host = host;
      }
    }
  }
  std::vector<std::string> silent;
  for (const auto& [host, ranks] : silent_hosts)
    silent.push_back(fmt::format("{} (ranks {})", host, ranks));
  const std::string msg = fmt::format(
      "watchdog: rank {} made no progress for {:.1f} s (limit {:.1f} s) at step {} in phase {}; "
      "ranks that did not arrive: {}; ranks waiting in the collective: {}{}",
      comm_.rank(), stuck_for, timeout(), my_step, phase_.load(),
      missing.empty() ? "none (every rank is in this step's collective: the network between "
                        "the hosts or the communication library is stuck)"
                      : fmt::format("{}", fmt::join(missing, ", ")),
      arrived.empty() ? "none" : fmt::format("{}", fmt::join(arrived, ", ")),
      silent.empty() ? ""
                     : fmt::format("; hosts silent (unreachable?): {}", fmt::join(silent, ", ")));
  {
    std::string report = msg + "\n\nlast known phase of every rank:\n";
    for (const auto& d : dump) report += "  " + d + "\n";
    try {
      replace_file((fs::path(run_dir_) / "logs" / fmt::format("watchdog-rank-{}.txt", comm_.rank()))
                       .string(),
                   report);
    } catch (const Error&) {
      // The same report goes to the log and stderr below.
    }
  }
  spdlog::error("{}", msg);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  record_failure(kExitHang, "watchdog", msg, culprit, culprit_host);
  comm_.abort(kExitHang);
}

}  // namespace trainrun
