// OpEvents: the CUDA backend's device timing of observed ops (Backend::op_time_begin/_end,
// report_op_times_impl; OpClock::device). A pair of CUDA events is recorded on the default stream
// around each op, so the host never waits while a traced step runs; report() waits once for the
// last event and tells the observer every op's interval. Each report window starts with a base
// event recorded on an idle device at a known steady-clock time, so the events' elapsed times
// map onto the host's clock (the trace's time base) without a wait per op.
// Private to the plugin. Thread safety: none (the backend's).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "trainrun/backend/backend.h"

namespace trainrun::cuda {

class OpEvents {
 public:
  OpEvents() = default;
  ~OpEvents();
  OpEvents(const OpEvents&) = delete;
  OpEvents& operator=(const OpEvents&) = delete;

  // Marks the start of an op on the stream (the first of a window synchronises the device once
  // and records the base).
  void begin();
  // Marks the end of the op begin() started; an op whose end is never marked (it threw) is
  // dropped, its start reused.
  void end(Op op);
  // Waits for the device and tells `o` every op marked since the last report, in order; then
  // the events are free for the next window.
  void report(OpObserver& o);

 private:
  struct Marked {
    Op op;
    size_t start, end;  // indices into events_
  };
  cudaEvent_t next();  // a recorded-to-be event from the pool (created on first use)

  std::vector<cudaEvent_t> events_;  // the pool; events_[0] is a window's base once used_ > 0
  size_t used_ = 0;
  size_t start_ = 0;   // the start event of the op in flight
  bool open_ = false;  // begin() marked a start that no end() closed yet
  double base_time_ = 0;
  std::vector<Marked> marked_;
};

}  // namespace trainrun::cuda
