// Optimizer: AdamW with decoupled weight decay over the flat buffers, and the LR schedule.
// With ZeRO-1 each rank owns a shard [begin, end) of the flat buffer and keeps moments only for
// it; without ZeRO the shard is the whole buffer.
#pragma once

#include <cstdint>

#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"
#include "trainrun/model/params.h"

namespace trainrun {

// Learning rate for optimizer step `step` (0-based) of `total`: linear warmup over
// warmup_steps, then cosine / linear decay to min_lr at `total`, or constant.
double learning_rate(const OptimizerConfig& cfg, int64_t step, int64_t total);

class AdamW {
 public:
  AdamW(ParamStore& ps, const OptimizerConfig& cfg, Shard shard);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of the shard's parameters from the shard's gradients times grad_scale (gradient
  // clipping's factor; the gradient buffer is left as it was). t is 1-based.
  void step(double lr, int64_t t, double grad_scale = 1.0);
  Tensor m() const;  // [shard.size()]
  Tensor v() const;
  Shard shard() const { return shard_; }

 private:
  ParamStore& ps_;
  OptimizerConfig cfg_;
  Shard shard_;
  void* m_ = nullptr;
  void* v_ = nullptr;
};

}  // namespace trainrun
