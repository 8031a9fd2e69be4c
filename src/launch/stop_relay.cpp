// The stop relay's handler and state: plain atomics, so the handler stays async-signal-safe.
#include "stop_relay.h"

#include <signal.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

constexpr std::array<int, 5> kRelayed = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

std::atomic<pid_t> g_child{0};
std::atomic<int> g_hard_stop{SIGTERM};
std::atomic<int> g_first{0};
std::atomic<int> g_interrupts{0};

int g_depth = 0;  // main thread only
std::array<struct sigaction, kRelayed.size()> g_previous;

bool is_interrupt(int sig) {
  return sig == SIGINT || sig == SIGUSR2;
}

void on_stop_signal(int sig) {
  const int saved = errno;
  int expected = 0;
  g_first.compare_exchange_strong(expected, sig);
  const int nth = is_interrupt(sig) ? ++g_interrupts : 1;
  if (const pid_t child = g_child.load(); child > 0)
    kill(child, relayed_signal(sig, nth, g_hard_stop.load()));
  errno = saved;
}

sigset_t make_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kRelayed) sigaddset(&set, s);
  return set;
}

}  // namespace

int relayed_signal(int sig, int nth, int hard_stop) {
  if (!is_interrupt(sig)) return SIGUSR1;
  return nth >= 3 ? hard_stop : SIGUSR2;
}

StopRelay::StopRelay() {
  if (g_depth++ > 0) return;
  g_first = 0;
  g_interrupts = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < kRelayed.size(); ++i) sigaction(kRelayed[i], &sa, &g_previous[i]);
}

StopRelay::~StopRelay() {
  if (--g_depth > 0) return;
  g_child = 0;
  for (size_t i = 0; i < kRelayed.size(); ++i) sigaction(kRelayed[i], &g_previous[i], nullptr);
}

const sigset_t& StopRelay::signals() {
  static const sigset_t set = make_set();
  return set;
}

void StopRelay::set_child(pid_t pid, int hard_stop) {
  g_hard_stop = hard_stop;
  g_child = pid;
}

int StopRelay::requested() {
  return g_first.load();
}

int StopRelay::interrupts() {
  return g_interrupts.load();
}

int StopRelay::stop_code() {
  const int sig = g_first.load();
  return sig == 0 ? 0 : is_interrupt(sig) ? int{kExitInterrupted} : int{kExitResumeMe};
}

bool StopRelay::sleep_unless_stopped(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (requested() == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return requested() != 0;
}

}  // namespace trainrun
