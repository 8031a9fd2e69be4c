#include "grad_sync.h"

namespace trainrun {

GradSync::GradSync(Communicator& comm, Tensor grads, int64_t bucket_elems)
    : comm_(comm),
      grads_(grads),
      bucket_elems_(bucket_elems),
      pending_begin_(grads.numel()),
      pending_end_(grads.numel()),
      stream_(nullptr) {}

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
  stream_.submit("allreduce bucket", [this, bucket = grads_.slice(begin, {end - begin})] {
    comm_.allreduce_sum(bucket);
  });
}

double GradSync::finish() {
  launch(pending_begin_, pending_end_);
  pending_begin_ = pending_end_ = grads_.numel();
  return stream_.wait(stream_.last());
}

}  // namespace trainrun
