// Stop signals are blocked in every thread and taken by one thread with sigwait(): a handler
// may otherwise run on any thread, in the middle of MPI, OpenMP or malloc, and libraries
// started later (MPI's progress threads) inherit the blocked mask too.
#include "signals.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace trainrun {

namespace {
std::atomic<int> g_signal{0};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&set, s);
  return set;
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
        if (sigwait(&set, &sig) != 0) continue;
        int expected = 0;
        g_signal.compare_exchange_strong(expected, sig);
      }
    }).detach();
  });
}

int stop_signal() {
  return g_signal.load();
}

}  // namespace trainrun
