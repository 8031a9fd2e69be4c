#include "op_events.h"

#include "cuda_check.h"

namespace trainrun::cuda {

OpEvents::~OpEvents() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpEvents::next() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    // Timing events: cudaEventDisableTiming (what nccl_comm.cpp's ordering events use) would
    // make cudaEventElapsedTime refuse them.
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreate (op timing)");
    events_.push_back(e);
  }
  return events_[used_++];
}

void OpEvents::begin() {
  if (used_ == 0) {
    // The window's base: the device idle, so the base event runs as it is recorded and the
    // host's clock read beside it is its time.
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an earlier kernel failed)");
    cuda_check(cudaEventRecord(next(), nullptr), "cudaEventRecord (op timing)");
    cuda_check(cudaEventSynchronize(events_[0]), "cudaEventSynchronize (op timing)");
    base_time_ = OpObserver::now();
  }
  // A start left open by an op that threw is recorded again rather than leaked.
  if (!open_) {
    start_ = used_;
    next();
    open_ = true;
  }
  cuda_check(cudaEventRecord(events_[start_], nullptr), "cudaEventRecord (op timing)");
}

void OpEvents::end(Op op) {
  const size_t e = used_;
  cuda_check(cudaEventRecord(next(), nullptr), "cudaEventRecord (op timing)");
  marked_.push_back({op, start_, e});
  open_ = false;
}

void OpEvents::report(OpObserver& o) {
  if (marked_.empty()) return;
  cuda_check(cudaEventSynchronize(events_[marked_.back().end]), "cudaEventSynchronize (op timing)");
  auto since_base = [&](size_t i) {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, events_[0], events_[i]),
               "cudaEventElapsedTime (op timing)");
    return base_time_ + static_cast<double>(ms) * 1e-3;
  };
  // Read every time first, then free the window: an observer that throws must not leave it
  // half reported.
  std::vector<Marked> marked;
  marked.swap(marked_);
  std::vector<double> times(2 * marked.size());
  for (size_t i = 0; i < marked.size(); ++i) {
    times[2 * i] = since_base(marked[i].start);
    times[2 * i + 1] = since_base(marked[i].end);
  }
  used_ = 0;
  open_ = false;
  for (size_t i = 0; i < marked.size(); ++i)
    o.op_done(marked[i].op, times[2 * i], times[2 * i + 1], OpClock::device);
}

}  // namespace trainrun::cuda
