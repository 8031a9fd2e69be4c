#include <algorithm>
#include <cmath>

#include "trainrun/optim/optimizer.h"

namespace trainrun {

double learning_rate(const OptimizerConfig& cfg, int64_t step, int64_t total) {
  if (cfg.warmup_steps > 0 && step < cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  if (cfg.schedule == LrSchedule::constant) return cfg.lr;
  const int64_t span = std::max<int64_t>(1, total - cfg.warmup_steps);
  const double r = std::clamp(static_cast<double>(step - cfg.warmup_steps) / span, 0.0, 1.0);
  if (cfg.schedule == LrSchedule::linear) return cfg.lr - r * (cfg.lr - cfg.min_lr);
  // cosine
  return cfg.min_lr + 0.5 * (1.0 + std::cos(M_PI * r)) * (cfg.lr - cfg.min_lr);
}

AdamW::AdamW(ParamStore& ps, const OptimizerConfig& cfg, std::vector<Shard> pieces)
    : ps_(ps), cfg_(cfg), pieces_(std::move(pieces)) {
  // Weight decay applies per parameter: the parameters overlapping the pieces become runs of
  // equal decay (neighbours merged), all updated in one call (one launch on a GPU).
  for (const Shard& piece : pieces_) {
    for (const ParamInfo& p : ps_.infos()) {
      const int64_t b = std::max(p.offset, piece.begin);
      const int64_t e = std::min(p.offset + p.numel, piece.end);
      if (b >= e) continue;
      const int64_t begin = numel_ + b - piece.begin;
      if (!runs_.empty() && runs_.back().decay == p.decay &&
          runs_.back().begin + runs_.back().n == begin)
        runs_.back().n += e - b;
      else
        runs_.push_back({begin, e - b, p.decay});
    }
    numel_ += piece.size();
  }
  Backend& be = ps.backend();
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(numel_, 1)) * dtype_size(ps.master_dtype());
  m_ = be.alloc(bytes);
  v_ = be.alloc(bytes);
  if (numel_ > 0) {
    be.fill(m(), 0.0);
    be.fill(v(), 0.0);
  }
}

AdamW::~AdamW() {
  ps_.backend().release(m_);
  ps_.backend().release(v_);
}

Tensor AdamW::m() const {
  return Tensor(m_, ps_.master_dtype(), ps_.backend().device(), {numel_});
}
Tensor AdamW::v() const {
  return Tensor(v_, ps_.master_dtype(), ps_.backend().device(), {numel_});
}

void AdamW::step(Tensor params, Tensor grads, double lr, int64_t t, double grad_scale) {
  if (numel_ == 0) return;
  AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(cfg_.betas.at(0));
  hp.beta2 = static_cast<float>(cfg_.betas.at(1));
  hp.eps = static_cast<float>(cfg_.eps);
  hp.step = t;
  hp.grad_scale = grad_scale;
  hp.weight_decay = static_cast<float>(cfg_.weight_decay);
  ps_.backend().adamw_runs(params, grads, m(), v(), hp, runs_);
}

}  // namespace trainrun
