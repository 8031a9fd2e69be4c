// CommStream: a communication thread that runs collectives one at a time in the order they are
// submitted, as a GPU's communication stream does. Every rank submits the same collectives in
// the same order, so any number may be in flight: the step loop queues a unit's all-gather
// ahead of need (prefetch) or its gradients' reduce-scatter behind it, computes meanwhile, and
// waits only for the one it is about to use. On the CPU this is what overlaps MPI with compute
// (Open MPI progresses a non-blocking collective only inside MPI calls); on a GPU the device
// communicator orders each collective after the compute queued before it was submitted.
// A collective that touches a buffer must not be submitted until the step loop has written it,
// and the step loop must not read or reuse the buffer before wait() returns for it.
// Every collective on a communicator the stream serves must go through the stream (two threads
// issuing collectives on one communicator could order them differently on different ranks).
// Threads: submit(), wait() and the accessors are the step loop's; the thread runs the queue.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "trainrun/core/thread_annotations.h"
#include "trainrun/obs/trace.h"

namespace trainrun {

class CommStream {
 public:
  using Ticket = uint64_t;  // completion is in order: ticket t done means every earlier one is
  // tracer may be null; it must outlive the stream.
  explicit CommStream(Tracer* tracer);
  ~CommStream();  // waits for what was submitted
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Queues `collective`. Traced as two spans named `name`: "comm" on the stream thread's row
  // while it runs, and "comm_queued" on the row "comm in flight" from its submission to its
  // end (the time a GPU profiler shows a collective pending on its stream).
  Ticket submit(std::string name, std::function<void()> collective) EXCLUDES(mu_);
  // Blocks until ticket t is done; rethrows the first collective's error. Returns the seconds
  // waited.
  double wait(Ticket t) EXCLUDES(mu_);
  bool done(Ticket t) EXCLUDES(mu_);
  Ticket last() const { return submitted_; }
  // Seconds the thread spent in collectives since the last call.
  double take_busy_seconds() EXCLUDES(mu_);

 private:
  void loop() EXCLUDES(mu_);

  Tracer* tracer_;
  Ticket submitted_ = 0;  // the step loop's
  Mutex mu_;
  CondVar cv_;
  struct Job {
    std::string name;
    std::function<void()> run;
    double submitted;
  };
  std::deque<Job> queue_ GUARDED_BY(mu_);
  Ticket completed_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  double busy_ GUARDED_BY(mu_) = 0;
  std::exception_ptr error_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trainrun
