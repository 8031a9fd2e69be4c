// The one clock: seconds on the monotonic steady clock, as a double, from an arbitrary epoch.
// Step times, phase timers, the watchdog's heartbeats and trace events all read it, so durations
// measured in different components are comparable and never jump with the wall clock.
#pragma once

#include <chrono>

namespace trainrun {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace trainrun
