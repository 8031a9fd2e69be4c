#include "grad_sync.h"

#include <utility>

#include "trainrun/core/clock.h"

namespace trainrun {

GradSync::GradSync(Communicator& comm, Tensor grads, int64_t bucket_elems)
    : comm_(comm),
      grads_(grads),
      bucket_elems_(bucket_elems),
      pending_begin_(grads.numel()),
      pending_end_(grads.numel()),
      thread_([this] { loop(); }) {}

GradSync::~GradSync() {
  {
    MutexLock lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void GradSync::ready(int64_t begin, int64_t end) {
  // Ranges must extend the pending block downwards; anything else (a model reporting out of
  // order) is sent on its own so correctness never depends on the order.
  if (end != pending_begin_) {
    launch(begin, end);
    return;
  }
  pending_begin_ = begin;
  if (pending_end_ - pending_begin_ >= bucket_elems_) {
    launch(pending_begin_, pending_end_);
    pending_end_ = pending_begin_;
  }
}

void GradSync::launch(int64_t begin, int64_t end) {
  if (end <= begin) return;
  {
    MutexLock lk(mu_);
    queue_.emplace_back(begin, end);
    ++in_flight_;
  }
  cv_.notify_all();
}

double GradSync::finish() {
  launch(pending_begin_, pending_end_);
  const double t0 = now();
  MutexLock lk(mu_);
  while (in_flight_ != 0) cv_.wait(mu_);
  pending_begin_ = pending_end_ = grads_.numel();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return now() - t0;
}

double GradSync::take_comm_seconds() {
  MutexLock lk(mu_);
  return std::exchange(comm_seconds_, 0.0);
}

void GradSync::loop() {
  for (;;) {
    std::pair<int64_t, int64_t> r;
    {
      MutexLock lk(mu_);
      while (!stop_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty()) return;
      r = queue_.front();
      queue_.pop_front();
    }
    const double t0 = now();
    try {
      comm_.allreduce_sum(grads_.slice(r.first, {r.second - r.first}));
    } catch (...) {
      MutexLock lk(mu_);
      error_ = std::current_exception();
    }
    {
      MutexLock lk(mu_);
      comm_seconds_ += now() - t0;
      --in_flight_;
    }
    cv_.notify_all();
  }
}

}  // namespace trainrun
