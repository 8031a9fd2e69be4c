// FaultInjector: the trainer's one handle on TRAINRUN_FAULTS (faults.h), test-only fault
// injection kept out of the step loop. Without a fault for this rank and attempt it is inert:
// wrap() hands the real backend back and on_step() does nothing, so a normal run pays nothing.
// With one, the numeric faults (nan, inf) live in a FaultyBackend wrapped around the real backend
// (faulty_backend.h), and the faults of the process (kill, exit, stall, freeze, slow) fire as a
// step begins.
//
// Why the trainer tells the step (on_step) rather than the wrappers inferring it: the backend and
// the communicators see ops and collectives, not steps, and counting them would break whenever a
// step's sequence changes (accumulation, evaluation, a checkpoint, a rollback that replays steps).
// The trainer numbers steps already; and the process faults must fire where they always have, as
// the step begins, before anything of it runs: there the watchdog sees the rank in its data phase,
// and slow's delay counts as data time (a straggler), which a wrapper around the communicator,
// firing at the step's first collective mid-backward, would change.
#pragma once

#include <cstdint>
#include <memory>

#include "faults.h"
#include "faulty_backend.h"
#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"

namespace trainrun {

class FaultInjector {
 public:
  FaultInjector() = default;  // inert
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Reads TRAINRUN_FAULTS for this rank and attempt (ConfigError when malformed) and warns loudly
  // when it names a fault here, so injection cannot slip silently into a normal run.
  void load(int rank, int restart_count);
  bool active() const { return faults_.any(); }
  // The backend to train on: `be` itself when inert, else a FaultyBackend around it. Once.
  std::unique_ptr<Backend> wrap(std::unique_ptr<Backend> be);
  // The model built on wrap()'s backend: the gradients and weights nan and inf overwrite.
  void watch(const StateBuffers& state);
  // The Nth step begins (numbered from 1, as metrics rows and checkpoints are).
  void on_step(int64_t nth);

 private:
  Faults faults_;
  FaultyBackend* backend_ = nullptr;  // owned by whoever wrap() handed it to
};

}  // namespace trainrun
