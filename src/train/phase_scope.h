// PhaseScope: one phase of a rank's training step, as a scope. Entering it tells the watchdog
// (heartbeat, failure record), opens the phase's span in the trace (--profile) and its range for
// a GPU profiler (NVTX), and reads the clock; leaving it closes them and adds the time between to
// the phase's StepTimes field. So the step loop (trainer.cpp) reads as its sequence of phases,
// one line each, around the arithmetic, and a phase cannot be told to one observer and not to
// another.
#pragma once

#include <cstdint>
#include <optional>

#include "step_phase.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/clock.h"
#include "trainrun/obs/trace.h"
#include "watchdog.h"

namespace trainrun {

// Who is told of the phases of one step, and which step it is.
struct PhaseObservers {
  Watchdog* watchdog = nullptr;  // null: none
  Tracer* tracer = nullptr;      // null: none
  Backend* be = nullptr;         // its NVTX ranges; null: none
  int64_t step = 0;              // the steps done before this one, as the watchdog counts them
};

// What a phase shows besides the watchdog's phase and its time.
enum class PhaseMarks : uint8_t {
  span_and_range,  // a trace span and an NVTX range, both named for the phase
  range_only,      // the NVTX range alone: the phase's spans are its collectives' own (comm)
  none,            // neither: the lead-in or the tail of a phase (the wait before a step, the last
                   // backward's drain), timed and told to the watchdog, but no span of its own
};

class PhaseScope {
 public:
  // `seconds`: the StepTimes field this phase's time adds to; null where the time is measured
  // otherwise (the data loader's wait, the collectives' own timers).
  PhaseScope(const PhaseObservers& to, Phase p, double* seconds = nullptr,
             PhaseMarks marks = PhaseMarks::span_and_range)
      : seconds_(seconds) {
    if (to.watchdog) to.watchdog->enter(p, to.step);
    if (marks == PhaseMarks::span_and_range) span_.emplace(to.tracer, phase_name(p), "phase");
    if (marks != PhaseMarks::none && to.be) range_.emplace(*to.be, phase_name(p));
    if (seconds_) t0_ = now();
  }
  ~PhaseScope() {
    if (seconds_) *seconds_ += now() - t0_;
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  double* seconds_;
  double t0_ = 0;
  std::optional<Tracer::Scope> span_;  // closed after the range, as they nest
  std::optional<BackendRange> range_;
};

}  // namespace trainrun
