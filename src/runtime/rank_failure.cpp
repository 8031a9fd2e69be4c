// The rank side of failure records: who this process is, which phase it is in, and the
// fatal-signal path, which may only use async-signal-safe calls (no allocation, no stdio): it
// writes a record rendered ahead of time, plus the phase, step and time.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>

#include "failure_record_json.h"
#include "trainrun/runtime/failure_record.h"
#include "trainrun/runtime/host.h"

namespace trainrun {
namespace {

constexpr std::array<int, 5> kFatalSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

// Set once by arm_failure_record, before other threads exist; read-only afterwards.
struct Identity {
  std::string run_dir, logs_dir, host, path, tmp_path;
  int rank = 0;
  std::array<std::string, kFatalSignals.size()> signal_heads;  // records without their tail
  std::array<struct sigaction, kFatalSignals.size()> previous;
};
std::atomic<const Identity*> g_identity{nullptr};  // never freed: a signal may come during exit

std::atomic<bool> g_written{false};
// Until the trainer names a phase, a rank is starting up.
std::atomic<const char*> g_phase{"startup"};
std::atomic<int64_t> g_step{0};

FailureRecord base_record(const Identity& id, int exit_code, const std::string& cause,
                          const std::string& message) {
  FailureRecord r;
  r.rank = r.culprit_rank = id.rank;
  r.host = r.culprit_host = id.host;
  r.pid = getpid();
  r.exit_code = exit_code;
  r.cause = cause;
  r.message = message;
  return r;
}

// Appends to a fixed buffer without allocating; silently truncates.
struct SignalSafeText {
  char buf[8192];
  size_t n = 0;
  void add(const char* s, size_t len) {
    for (size_t i = 0; i < len && n < sizeof buf; ++i) buf[n++] = s[i];
  }
  void add(const char* s) { add(s, std::strlen(s)); }
  void add_int(int64_t v) {
    char digits[24];
    size_t k = 0;
    const bool negative = v < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u);
    if (negative) add("-", 1);
    while (k) add(&digits[--k], 1);
  }
};

// A phase is written unescaped from the signal path, so it must need no escaping.
bool plain_word(const char* s) {
  for (size_t i = 0; s[i]; ++i) {
    const char c = s[i];
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (i >= 32 || !ok) return false;
  }
  return true;
}

void write_signal_record(const Identity& id, size_t which) {
  SignalSafeText t;
  t.add(id.signal_heads[which].data(), id.signal_heads[which].size());
  const char* phase = g_phase.load();
  t.add(",\"phase\":\"");
  if (plain_word(phase)) t.add(phase);
  t.add("\",\"step\":");
  t.add_int(g_step.load());
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  t.add(",\"time\":");
  t.add_int(now.tv_sec);
  t.add(".");
  const int64_t ms = now.tv_nsec / 1000000;
  if (ms < 100) t.add("0");
  if (ms < 10) t.add("0");
  t.add_int(ms);
  t.add("}\n");
  // The run directory may not exist yet (a failure during start-up): mkdir is signal-safe.
  mkdir(id.run_dir.c_str(), 0777);
  mkdir(id.logs_dir.c_str(), 0777);
  // O_EXCL | O_NOFOLLOW (signal-safe, as open is): never through a link planted at that name.
  unlink(id.tmp_path.c_str());
  const int fd =
      open(id.tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool ok = write(fd, t.buf, t.n) == static_cast<ssize_t>(t.n);
  close(fd);
  if (ok) rename(id.tmp_path.c_str(), id.path.c_str());
}

// Installed only once g_identity is set.
void on_fatal_signal(int sig) {
  const Identity* id = g_identity.load();
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    if (kFatalSignals[i] != sig) continue;
    if (!g_written.exchange(true)) write_signal_record(*id, i);
    // Hand the signal on: to the handler that was there (a sanitizer's, say) or the default
    // action, which ends the process with this signal once our handler returns.
    sigaction(sig, &id->previous[i], nullptr);
    raise(sig);
    return;
  }
}

void render_signal_records(Identity& id) {
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    const int sig = kFatalSignals[i];
    FailureRecord r = base_record(id, 128 + sig, "signal",
                                  fmt::format("killed by signal {} ({})", sig, strsignal(sig)));
    std::string line = failure_record_line(r);
    id.signal_heads[i] = line.substr(0, line.rfind(",\"phase\":"));
  }
}

void install_fatal_handlers(Identity& id) {
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(kFatalSignals[i], &sa, &id.previous[i]);
  }
}

}  // namespace

void arm_failure_record(const std::string& run_dir, int rank) {
  if (g_identity.load()) return;
  auto* id = new Identity;
  id->run_dir = run_dir;
  id->rank = rank;
  id->host = host_name();
  id->path = failure_record_path(run_dir, rank);
  id->logs_dir = std::filesystem::path(id->path).parent_path().string();
  id->tmp_path = fmt::format("{}/.failure-rank-{}.json.{}.tmp", id->logs_dir, rank, getpid());
  // A record is about this launch only. Nothing is created until there is something to say:
  // the run directory is the trainer's to set up.
  std::error_code ec;
  std::filesystem::remove(id->path, ec);
  render_signal_records(*id);
  g_identity.store(id);
  install_fatal_handlers(*id);
}

void record_failure(int exit_code, const std::string& cause, const std::string& message,
                    int culprit_rank, const std::string& culprit_host) {
  const Identity* id = g_identity.load();
  if (!id || g_written.exchange(true)) return;
  FailureRecord r = base_record(*id, exit_code, cause, message);
  if (culprit_rank >= 0) {
    r.culprit_rank = culprit_rank;
    r.culprit_host = culprit_host;
  }
  r.phase = g_phase.load();
  r.step = g_step.load();
  r.time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_failure_record(id->run_dir, r);
}

void note_phase(const char* phase, int64_t step) {
  g_phase.store(phase, std::memory_order_relaxed);
  g_step.store(step, std::memory_order_relaxed);
}

}  // namespace trainrun
