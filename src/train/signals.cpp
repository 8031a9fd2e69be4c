#include "signals.h"

#include <atomic>
#include <csignal>

namespace trainrun {

namespace {
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
}
}  // namespace

void install_stop_signals() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaction(s, &sa, nullptr);
}

int stop_signal() {
  return g_signal.load();
}

}  // namespace trainrun
