// A communicator that records its blocking collectives in the trace (trace.h) and forwards
// everything to another. The trainer hands one over the tp group to the model, so a --profile
// trace shows the tensor-parallel all-reduces inside each block, each as a "comm" span (on CUDA
// the span is the enqueue: the collective itself runs on the communicator's stream). A non-
// blocking one is recorded where it makes the caller wait ("allreduce wait"): the part of it that
// no compute hid. Borrows both; they must outlive it. Thread safety: as the communicator's.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "trainrun/comm/comm.h"
#include "trainrun/core/clock.h"
#include "trainrun/obs/trace.h"

namespace trainrun {

class TracedCommunicator final : public Communicator {
 public:
  TracedCommunicator(Communicator& inner, Tracer& tracer, std::string prefix)
      : c_(inner), tracer_(tracer), prefix_(std::move(prefix)) {}

  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  int local_rank() const override { return c_.local_rank(); }
  int local_size() const override { return c_.local_size(); }
  std::string host() const override { return c_.host(); }
  std::string kind() const override { return c_.kind(); }

  void allreduce_sum(Tensor x) override {
    timed("allreduce", [&] { c_.allreduce_sum(x); });
  }
  void allreduce_avg(Tensor x) override {
    timed("allreduce", [&] { c_.allreduce_avg(x); });
  }
  std::unique_ptr<Request> iallreduce_sum(Tensor x) override {
    return traced(c_.iallreduce_sum(x), "allreduce wait");
  }
  void reduce_scatter_sum(Tensor x) override {
    timed("reduce_scatter", [&] { c_.reduce_scatter_sum(x); });
  }
  std::unique_ptr<Request> ireduce_scatter_sum(Tensor x) override {
    return traced(c_.ireduce_scatter_sum(x), "reduce_scatter wait");
  }
  void all_gather(Tensor x) override {
    timed("all_gather", [&] { c_.all_gather(x); });
  }
  void broadcast(Tensor x, int root) override { c_.broadcast(x, root); }
  void gather(Tensor mine, Tensor all, int root) override { c_.gather(mine, all, root); }
  void barrier() override { c_.barrier(); }
  void all_gather_doubles(const double* in, int n, double* out) override {
    c_.all_gather_doubles(in, n, out);
  }
  void all_gather_bytes(const void* in, size_t n, void* out) override {
    c_.all_gather_bytes(in, n, out);
  }
  void broadcast_bytes(void* data, size_t n, int root) override {
    c_.broadcast_bytes(data, n, root);
  }
  [[noreturn]] void abort(int code) override {
    c_.abort(code);
    std::_Exit(code);  // not reached: the compiler cannot see that a virtual abort ends
  }

 private:
  // A started collective whose wait() is a span.
  class TracedRequest final : public Request {
   public:
    TracedRequest(std::unique_ptr<Request> inner, TracedCommunicator& owner, const char* what)
        : r_(std::move(inner)), owner_(owner), what_(what) {}
    void wait() override {
      owner_.timed(what_, [&] { r_->wait(); });
    }
    bool test() override { return r_->test(); }

   private:
    std::unique_ptr<Request> r_;
    TracedCommunicator& owner_;
    const char* what_;
  };
  std::unique_ptr<Request> traced(std::unique_ptr<Request> r, const char* what) {
    return std::make_unique<TracedRequest>(std::move(r), *this, what);
  }

  template <class F>
  void timed(const char* what, F&& f) {
    if (!tracer_.active()) return f();
    const double t0 = now();
    f();
    tracer_.span((prefix_ + what).c_str(), "comm", t0, now());
  }

  Communicator& c_;
  Tracer& tracer_;
  std::string prefix_;
};

}  // namespace trainrun
