// GradSync: allreduces gradient buckets on a communication thread while backward continues.
// The model reports finished ranges in decreasing offset order; once enough bytes are ready
// they go out as one bucket, so communication overlaps the rest of backward.
// Threads: ready() and finish() are called by the step loop only; the communication thread owns
// the collectives. They share the queue and counters below under mu_; the gradient buffer itself
// is handed over range by range (the step loop never touches a range after reporting it ready,
// until finish() returns).
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <thread>

#include "trainrun/comm/comm.h"
#include "trainrun/core/thread_annotations.h"

namespace trainrun {

class GradSync {
 public:
  GradSync(Communicator& comm, Tensor grads, int64_t bucket_elems);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Range [begin, end) of the flat gradient buffer is final. Ranges arrive top-down.
  void ready(int64_t begin, int64_t end);
  // Sends what is left and waits for every bucket. Returns seconds the caller waited.
  double finish() EXCLUDES(mu_);
  // Seconds the communication thread spent in collectives since the last call.
  double take_comm_seconds() EXCLUDES(mu_);

 private:
  void loop() EXCLUDES(mu_);
  void launch(int64_t begin, int64_t end) EXCLUDES(mu_);

  Communicator& comm_;
  Tensor grads_;
  int64_t bucket_elems_;
  // The step loop's own: ready but not yet sent, [pending_begin_, pending_end_).
  int64_t pending_begin_, pending_end_;

  Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<int64_t, int64_t>> queue_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  double comm_seconds_ GUARDED_BY(mu_) = 0;
  std::exception_ptr error_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trainrun
