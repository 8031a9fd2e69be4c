#include "evaluator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "trainrun/core/tensor.h"
#include "trainrun/runtime/stop_signals.h"

namespace trainrun {

Evaluator::Evaluator(const TrainConfig& train, int accum, Batches& batches, Model& model,
                     Communicator& comm, Watchdog* watchdog)
    : every_(train.eval_every),
      last_step_(train.steps),
      batches_per_eval_(train.eval_steps),
      accum_(accum),
      batches_(batches),
      model_(model),
      comm_(comm),
      watchdog_(watchdog) {}

void Evaluator::phase(Phase p, int64_t step) {
  if (watchdog_) watchdog_->enter(p, step);
}

bool Evaluator::due(int64_t step) const {
  return every_ > 0 && (step % every_ == 0 || step == last_step_);
}

std::optional<double> Evaluator::run(int64_t step) {
  if (batches_per_eval_ <= 0) return NAN;
  phase(Phase::eval, step);
  double sum = 0;
  int done = 0;
  for (; done < batches_per_eval_ && stop_signal() == 0; ++done) {
    for (int m = 0; m < accum_; ++m) {
      batches_.fetch_val(done, m);
      model_.set_batch(batches_.x(), batches_.y());
      model_.set_documents(batches_.doc_start());
      sum += model_.forward(false, 0);
    }
  }
  double v[2] = {sum / (std::max(done, 1) * accum_), done < batches_per_eval_ ? 1.0 : 0.0};
  phase(Phase::comm, step);
  if (comm_.size() > 1) {
    Tensor t(v, DType::f64, Device::cpu, {2});
    comm_.allreduce_avg(t);
  }
  if (v[1] == 0) return v[0];
  spdlog::warn("step {}: stop requested during the evaluation; abandoned it after {} of {} batches",
               step, done, batches_per_eval_);
  return std::nullopt;
}

}  // namespace trainrun
