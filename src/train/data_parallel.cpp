#include "data_parallel.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "grad_sync.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/state_buffer.h"

namespace trainrun {

DataParallel::DataParallel(Communicator& host, Communicator& device, ParamStore& ps,
                           const OptimizerConfig& cfg, Shard shard, Tracer* tracer)
    : host_(host),
      device_(device),
      ps_(ps),
      tracer_(tracer),
      grad_clip_(cfg.grad_clip),
      opt_(ps, cfg, shard) {}

DataParallel::~DataParallel() = default;

void DataParallel::trace(const char* span, double t0, double t1) {
  if (tracer_) tracer_->span(span, "comm", t0, t1);
}

template <class F>
void DataParallel::timed(const char* span, StepTimes& t, F&& collective) {
  const double t0 = now();
  collective();
  const double t1 = now();
  trace(span, t0, t1);
  t.comm_wait += t1 - t0;
  t.comm_total += t1 - t0;
}

void DataParallel::broadcast_params() {
  if (host_.size() > 1) device_.broadcast(ps_.params(), 0);
}

StepStats DataParallel::reduce_stats(double local_loss, bool stop_requested, StepTimes& t) {
  const Shard s = shard();
  const Tensor my_grads = ps_.grads().slice(s.begin, {s.size()});
  double stats[3] = {local_loss, s.size() > 0 ? ps_.backend().sum_squares(my_grads) : 0.0,
                     stop_requested ? 1.0 : 0.0};
  const int world = host_.size();
  if (world > 1) {
    timed("allreduce loss+norm", t,
          [&] { host_.allreduce_sum(Tensor(stats, DType::f64, Device::cpu, {3})); });
    stats[0] /= world;
    if (copies_per_gradient() > 1) stats[1] /= copies_per_gradient();
  }
  return StepStats{stats[0], std::sqrt(stats[1]), stats[2] != 0};
}

void DataParallel::update(double lr, int64_t step, double grad_norm, StepTimes& t) {
  // Clipping scales the gradients inside the update's pass (AdamWParams::grad_scale): a separate
  // scale() pass over them was 2% of a step on GPT-2-sized models (bench/RESULTS.md section 17).
  const bool clip = grad_clip_ > 0 && grad_norm > grad_clip_;
  opt_.step(lr, step, clip ? grad_clip_ / (grad_norm + 1e-6) : 1.0);
  gather_params(t);
}

// AdamW's two moments by their names in a checkpoint.
std::vector<std::pair<std::string, Tensor>> DataParallel::moment_tensors() const {
  return {{"optimizer/m", opt_.m()}, {"optimizer/v", opt_.v()}};
}

void DataParallel::state_dict(StateDict& out) {
  const Shard held = shard();
  const Shard mine = shard_of(ps_.numel(), host_.size(), host_.rank());  // inside `held`
  const std::vector<ParamEntry> params = ps_.entries();
  for (const auto& [prefix, moments] : moment_tensors())
    add_flat_state(out, prefix, params, mine,
                   [this, held, m = moments](int64_t at, int64_t n, float* o) {
                     ps_.backend().copy(Tensor(o, DType::f32, Device::cpu, {n}),
                                        m.slice(at - held.begin, {n}));
                   });
}

void DataParallel::load_state_dict(StateSource& in) {
  const Shard s = shard();
  const std::vector<ParamEntry> params = ps_.entries();
  StateBuffer host(static_cast<size_t>(s.size()));  // every element is read below
  for (const auto& [prefix, moments] : moment_tensors()) {
    read_flat_state(in, prefix, params, s, host.data());
    if (s.size() > 0)
      ps_.backend().copy(moments, Tensor(host.data(), DType::f32, Device::cpu, {s.size()}));
  }
}

namespace {

// Every rank holds every gradient and moment; buckets of gradients are summed while backward
// computes the rest.
class Ddp final : public DataParallel {
 public:
  Ddp(Communicator& host, Communicator& device, ParamStore& ps, const OptimizerConfig& cfg,
      Tracer* tracer)
      : DataParallel(host, device, ps, cfg, Shard{0, ps.numel()}, tracer) {
    if (host.size() > 1) sync_ = std::make_unique<GradSync>(device, ps.grads(), kGradBucketElems);
  }

  GradReadyFn grad_ready_hook() override {
    if (!sync_) return {};
    return [this](int64_t begin, int64_t end) { sync_->ready(begin, end); };
  }
  void reduce_grads(StepTimes& t) override {
    if (!sync_) return;
    const double t0 = now();
    t.comm_wait += sync_->finish();
    trace("allreduce wait", t0, now());
    t.comm_total += sync_->take_comm_seconds();
  }

 protected:
  int copies_per_gradient() const override { return host_.size(); }
  void gather_params(StepTimes&) override {}

 private:
  std::unique_ptr<GradSync> sync_;
};

// Each rank owns shard_of(n) of the gradients, moments and update.
class Zero1 final : public DataParallel {
 public:
  Zero1(Communicator& host, Communicator& device, ParamStore& ps, const OptimizerConfig& cfg,
        Tracer* tracer)
      : DataParallel(host, device, ps, cfg, shard_of(ps.numel(), host.size(), host.rank()),
                     tracer) {}

  GradReadyFn grad_ready_hook() override { return {}; }
  void reduce_grads(StepTimes& t) override {
    if (host_.size() > 1)
      timed("reduce_scatter", t, [&] { device_.reduce_scatter_sum(ps_.grads()); });
  }

 protected:
  int copies_per_gradient() const override { return 1; }
  void gather_params(StepTimes& t) override {
    if (host_.size() > 1) timed("all_gather params", t, [&] { device_.all_gather(ps_.params()); });
  }
};

}  // namespace

std::unique_ptr<DataParallel> DataParallel::make(bool zero, Communicator& host,
                                                 Communicator& device, ParamStore& ps,
                                                 const OptimizerConfig& cfg, Tracer* tracer) {
  if (zero) return std::make_unique<Zero1>(host, device, ps, cfg, tracer);
  return std::make_unique<Ddp>(host, device, ps, cfg, tracer);
}

}  // namespace trainrun
