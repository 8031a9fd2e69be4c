#include "comm_stream.h"

#include <utility>

#include "trainrun/core/clock.h"

namespace trainrun {

CommStream::CommStream(Tracer* tracer) : tracer_(tracer), thread_([this] { loop(); }) {}

CommStream::~CommStream() {
  {
    MutexLock lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CommStream::Ticket CommStream::submit(std::string name, std::function<void()> collective) {
  {
    MutexLock lk(mu_);
    queue_.push_back({std::move(name), std::move(collective), now()});
  }
  cv_.notify_all();
  return ++submitted_;
}

double CommStream::wait(Ticket t) {
  const double t0 = now();
  MutexLock lk(mu_);
  while (completed_ < t && !error_) cv_.wait(mu_);
  if (error_) std::rethrow_exception(error_);  // the stream is broken for good: every wait throws
  return now() - t0;
}

bool CommStream::done(Ticket t) {
  MutexLock lk(mu_);
  if (error_) std::rethrow_exception(error_);
  return completed_ >= t;
}

double CommStream::take_busy_seconds() {
  MutexLock lk(mu_);
  return std::exchange(busy_, 0.0);
}

void CommStream::loop() {
  for (;;) {
    Job job;
    {
      MutexLock lk(mu_);
      // After stop, what was submitted still runs: the other ranks expect it.
      while (!stop_ && queue_.empty()) cv_.wait(mu_);
      if (queue_.empty() || error_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const double t0 = now();
    std::exception_ptr failed;
    try {
      job.run();
    } catch (...) {
      failed = std::current_exception();
    }
    const double t1 = now();
    if (tracer_) {
      tracer_->span(job.name.c_str(), "comm", t0, t1);
      tracer_->span(job.name.c_str(), "comm_queued", job.submitted, t1, "comm in flight");
    }
    {
      MutexLock lk(mu_);
      busy_ += t1 - t0;
      ++completed_;
      if (failed && !error_) error_ = failed;
    }
    cv_.notify_all();
  }
}

}  // namespace trainrun
