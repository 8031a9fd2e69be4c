#include "faulty_backend.h"

#include <cmath>

namespace trainrun {

namespace {
// Whether x lies in `buffer` (a view into it, as the gradient norm's shard of the gradients).
bool inside(const Tensor& x, const Tensor& buffer) {
  const auto* b = static_cast<const char*>(buffer.data);
  const auto* p = static_cast<const char*>(x.data);
  return p && b && p >= b && p + x.bytes() <= b + buffer.bytes();
}
}  // namespace

FaultyBackend::FaultyBackend(std::unique_ptr<Backend> real, Faults& faults)
    : real_(std::move(real)), faults_(faults) {}

double FaultyBackend::sum_impl(Tensor x, bool squares) {
  if (!squares) return real_->sum(x);
  // The whole buffer, not just the shard the norm reads: the state the step then holds is the
  // one a NaN from the backward pass would leave.
  if (state_ && faults_.poison(step_) && inside(x, state_->grads)) real_->fill(state_->grads, NAN);
  return real_->sum_squares(x);
}

void FaultyBackend::synchronize() {
  // After the update, its ZeRO all-gather and the bf16 refresh: the compute copy is set too, as
  // the refresh would have rounded +inf masters to it.
  if (state_ && faults_.diverge(step_)) {
    real_->fill(state_->masters, INFINITY);
    if (state_->compute.data != state_->masters.data) real_->fill(state_->compute, INFINITY);
  }
  real_->synchronize();
}

bool FaultyBackend::op_time_begin() {
  op_t0_ = OpObserver::now();
  return true;
}

void FaultyBackend::op_time_end(Op op) {
  timed_.push_back({op, op_t0_, OpObserver::now()});
}

void FaultyBackend::report_op_times_impl(OpObserver& o) {
  for (const TimedOp& t : timed_) o.op_done(t.op, t.t0, t.t1, OpClock::host);
  timed_.clear();
}

}  // namespace trainrun
