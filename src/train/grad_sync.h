// GradSync: allreduces gradient buckets on a communication stream while backward continues.
// The model reports finished ranges in decreasing offset order; once enough bytes are ready
// they go out as one bucket, so communication overlaps the rest of backward.
// Threads: ready() and finish() are called by the step loop only; the stream's thread runs the
// collectives (comm_stream.h). The gradient buffer is handed over range by range (the step loop
// never touches a range after reporting it ready, until finish() returns).
#pragma once

#include <cstdint>

#include "comm_stream.h"
#include "trainrun/comm/comm.h"

namespace trainrun {

class GradSync {
 public:
  GradSync(Communicator& comm, Tensor grads, int64_t bucket_elems);

  // Range [begin, end) of the flat gradient buffer is final. Ranges arrive top-down.
  void ready(int64_t begin, int64_t end);
  // Sends what is left and waits for every bucket. Returns seconds the caller waited.
  double finish();
  // Seconds the stream spent in collectives since the last call.
  double take_comm_seconds() { return stream_.take_busy_seconds(); }

 private:
  void launch(int64_t begin, int64_t end);

  Communicator& comm_;
  Tensor grads_;
  int64_t bucket_elems_;
  // Ready but not yet sent, [pending_begin_, pending_end_).
  int64_t pending_begin_, pending_end_;
  CommStream stream_;  // last: destroyed first, it runs what was queued
};

}  // namespace trainrun
