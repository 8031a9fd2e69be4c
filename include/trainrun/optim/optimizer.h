// Optimizer: AdamW with decoupled weight decay over the flat buffers, and the LR schedule.
// Each rank updates the flat ranges it owns (its pieces: the whole buffer without ZeRO, one
// shard with ZeRO-1, a shard of every unit with ZeRO-2/3) and keeps moments only for them,
// packed in the pieces' order, as the caller packs the weights and gradients it passes.
#pragma once

#include <cstdint>
#include <vector>

#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"
#include "trainrun/model/params.h"

namespace trainrun {

// Learning rate for optimizer step `step` (0-based) of `total`: linear warmup over
// warmup_steps, then cosine / linear decay to min_lr at `total`, or constant.
double learning_rate(const OptimizerConfig& cfg, int64_t step, int64_t total);

class AdamW {
 public:
  // pieces: ascending, disjoint flat ranges of ps's layout (which parameter decays where).
  AdamW(ParamStore& ps, const OptimizerConfig& cfg, std::vector<Shard> pieces);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of the pieces' weights `params` from their gradients `grads` (both packed,
  // numel() elements) times grad_scale (gradient clipping's factor; the gradients are left as
  // they were). t is 1-based.
  void step(Tensor params, Tensor grads, double lr, int64_t t, double grad_scale = 1.0);
  Tensor m() const;  // [numel()]
  Tensor v() const;
  const std::vector<Shard>& pieces() const { return pieces_; }
  int64_t numel() const { return numel_; }

 private:
  ParamStore& ps_;
  OptimizerConfig cfg_;
  std::vector<Shard> pieces_;
  int64_t numel_ = 0;
  std::vector<AdamWRun> runs_;  // weight decay by packed element: runs of equal decay
  void* m_ = nullptr;
  void* v_ = nullptr;
};

}  // namespace trainrun
