// OpSpans: the bridge from the backend's op observer to the tracer.
#pragma once

#include "trainrun/backend/backend.h"
#include "trainrun/obs/trace.h"

namespace trainrun {

// Under --profile, every backend op of a traced step becomes a span of category "op", which the
// tracer also sums per op (trace/ops-rank-N.txt): where the step's time goes, op by op.
class OpSpans : public OpObserver {
 public:
  explicit OpSpans(Tracer& t) : t_(t) {}
  void op_done(Op op, double t0, double t1) override { t_.span(op_name(op), "op", t0, t1); }

 private:
  Tracer& t_;
};

}  // namespace trainrun
