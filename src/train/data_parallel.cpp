#include "data_parallel.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "grad_sync.h"
#include "trainrun/core/clock.h"

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

void DataParallel::copy_moments(float* m, float* v) const {
  const int64_t n = shard().size();
  if (n == 0) return;
  ps_.backend().copy(Tensor(m, DType::f32, Device::cpu, {n}), opt_.m());
  ps_.backend().copy(Tensor(v, DType::f32, Device::cpu, {n}), opt_.v());
}

void DataParallel::copy_moments_range(Shard range, float* m, float* v) const {
  const Shard s = shard();
  if (range.begin < s.begin || range.end > s.end)
    throw std::logic_error("copy_moments_range: the range lies outside this rank's shard");
  const int64_t n = range.size();
  if (n == 0) return;
  const int64_t at = range.begin - s.begin;
  ps_.backend().copy(Tensor(m, DType::f32, Device::cpu, {n}), opt_.m().slice(at, {n}));
  ps_.backend().copy(Tensor(v, DType::f32, Device::cpu, {n}), opt_.v().slice(at, {n}));
}

void DataParallel::restore_optimizer_state(const CheckpointData& ck) {
  const Shard s = shard();
  if (s.size() == 0) return;
  const int64_t held_end = ck.moments_begin + static_cast<int64_t>(ck.adam_m.size());
  if (s.begin < ck.moments_begin || s.end > held_end)
    throw std::logic_error("restore_optimizer_state: the checkpoint's moments miss this shard");
  // A Tensor views memory without constness; copy() only reads its source.
  const auto range = [&s, &ck](const StateBuffer& held) {
    return Tensor(const_cast<float*>(held.data()) + (s.begin - ck.moments_begin), DType::f32,
                  Device::cpu, {s.size()});
  };
  ps_.backend().copy(opt_.m(), range(ck.adam_m));
  ps_.backend().copy(opt_.v(), range(ck.adam_v));
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
  // Every rank's moments are the same: rank 0's own are the full state.
  void gather_optimizer_state(CheckpointData* ck) override {
    if (!ck) return;
    const size_t n = static_cast<size_t>(ps_.numel());
    ck->adam_m.resize(n);
    ck->adam_v.resize(n);
    copy_moments(ck->adam_m.data(), ck->adam_v.data());
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
  // Rank 0 receives every shard in place; the others send theirs from a shard-sized buffer.
  void gather_optimizer_state(CheckpointData* ck) override {
    const Shard s = shard();
    const int64_t n = ps_.numel();
    if (ck) {
      // Every element is overwritten below (this rank's shard, then the others' by the gather).
      ck->adam_m.resize(static_cast<size_t>(n));
      ck->adam_v.resize(static_cast<size_t>(n));
      copy_moments(ck->adam_m.data() + s.begin, ck->adam_v.data() + s.begin);
      gather(ck->adam_m.data() + s.begin, ck->adam_m.data());
      gather(ck->adam_v.data() + s.begin, ck->adam_v.data());
      return;
    }
    std::vector<float> m(static_cast<size_t>(s.size())), v(static_cast<size_t>(s.size()));
    copy_moments(m.data(), v.data());
    gather(m.data(), nullptr);
    gather(v.data(), nullptr);
  }

 protected:
  int copies_per_gradient() const override { return 1; }
  void gather_params(StepTimes& t) override {
    if (host_.size() > 1) timed("all_gather params", t, [&] { device_.all_gather(ps_.params()); });
  }

 private:
  void gather(float* mine, float* all) {
    host_.gather(Tensor(mine, DType::f32, Device::cpu, {shard().size()}),
                 all ? Tensor(all, DType::f32, Device::cpu, {ps_.numel()}) : Tensor(), 0);
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
