// GradSync: allreduces gradient buckets on a communication thread while backward continues.
// The model reports finished ranges in decreasing offset order; once enough bytes are ready
// they go out as one bucket, so communication overlaps the rest of backward.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "trainrun/comm.h"

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
  double finish();
  // Seconds the communication thread spent in collectives since the last call.
  double take_comm_seconds();

 private:
  void loop();
  void launch(int64_t begin, int64_t end);

  Communicator& comm_;
  Tensor grads_;
  int64_t bucket_elems_;
  int64_t pending_begin_, pending_end_;  // ready but not yet sent: [pending_begin_, pending_end_)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, int64_t>> queue_;
  int in_flight_ = 0;
  bool stop_ = false;
  double comm_seconds_ = 0;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace trainrun
