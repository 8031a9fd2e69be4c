// Stop signals are blocked in every thread and taken by one thread with sigwait(): a handler
// may otherwise run on any thread, in the middle of MPI, OpenMP or malloc, and libraries
// started later (MPI's progress threads) inherit the blocked mask too. That thread also acts on
// a second SIGINT itself, so it works wherever the step loop is (setup, evaluation, checkpoint).
#include "trainrun/runtime/stop_signals.h"

#include <fmt/format.h>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "trainrun/core/errors.h"
#include "trainrun/runtime/failure_record.h"

namespace trainrun {

namespace {
std::atomic<int> g_signal{0};
std::atomic<bool> g_in_step_loop{false};

// A launching trainrun relays SIGINT to its ranks as SIGUSR2: mpirun would turn SIGINT into a
// kill (launch: stop_relay.h).
bool relayed_by_trainrun() {
  const char* v = std::getenv("TRAINRUN_LAUNCHED_BY");
  return v && std::strcmp(v, "trainrun") == 0;
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set, s);
  if (relayed_by_trainrun()) sigaddset(&set, SIGUSR2);
  return set;
}

// A second interrupt: the user means now. No checkpoint (one may be half written: it stays a
// temporary file, never a checkpoint), no destructors (they would wait for the writer).
[[noreturn]] void stop_now() {
  const char* msg =
      "second interrupt: stopping at once, without a checkpoint; the newest checkpoint "
      "written before stays the one to resume from";
  spdlog::warn("{}", msg);
  spdlog::default_logger()->flush();
  record_failure(kExitInterrupted, "stopped", msg);
  std::_Exit(kExitInterrupted);
}

// A stop before the first step: nothing to save (a resumed run's checkpoint is still on disk),
// and setup may be deep in a data scan or a model build with no point to stop at.
[[noreturn]] void stop_during_setup(int sig) {
  const int code = sig == SIGINT ? kExitInterrupted : kExitResumeMe;
  const std::string msg = fmt::format(
      "stop requested (signal {}) during setup, before the first step: stopping at once; "
      "there is nothing new to checkpoint, the run's checkpoints stay as they were",
      sig);
  // To stderr itself: the console logger may not be set up yet.
  fmt::print(stderr, "{}\n", msg);
  record_failure(code, "stopped", msg);
  std::_Exit(code);
}

void take(int sig) {
  if (sig == SIGUSR2) sig = SIGINT;
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    if (!g_in_step_loop.load()) stop_during_setup(sig);
    if (sig == SIGINT)
      spdlog::warn(
          "interrupt: stopping after this step with a checkpoint; interrupt again to stop at "
          "once, without one");
    return;
  }
  if (sig == SIGINT) stop_now();
}
}  // namespace

void install_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) == 0) take(sig);
      }
    }).detach();
  });
}

int stop_signal() {
  return g_signal.load();
}

void enter_step_loop() {
  g_in_step_loop.store(true);
}

}  // namespace trainrun
