#include "data_parallel.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "grad_sync.h"
#include "sharded_data_parallel.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/state_buffer.h"

namespace trainrun {

std::vector<Shard> HeldPieces::written() const {
  std::vector<Shard> out;
  for (const Shard& p : pieces) {
    const Shard part = shard_of(p.size(), copies, copy_index);
    if (part.size() > 0) out.push_back({p.begin + part.begin, p.begin + part.end});
  }
  return out;
}

int64_t HeldPieces::packed(int64_t at) const {
  int64_t base = 0;
  for (const Shard& p : pieces) {
    if (at >= p.begin && at < p.end) return base + at - p.begin;
    base += p.size();
  }
  throw std::logic_error("HeldPieces::packed: element outside the pieces");
}

DataParallel::DataParallel(const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg,
                           std::vector<Shard> pieces, Tracer* tracer)
    : mesh_(mesh),
      host_(mesh.host_group(MeshAxis::dp)),
      device_(mesh.device_group(MeshAxis::dp)),
      ps_(ps),
      tracer_(tracer),
      grad_clip_(cfg.grad_clip),
      opt_(ps, cfg, std::move(pieces)) {}

DataParallel::~DataParallel() = default;

void DataParallel::trace(const char* span, double t0, double t1) {
  if (tracer_) tracer_->span(span, "comm", t0, t1);
}

HeldPieces DataParallel::replicated(Tensor all) const {
  return {{Shard{0, ps_.numel()}}, all, host_.size(), host_.rank()};
}

void DataParallel::initialize_weights(uint64_t seed) {
  if (ps_.storage() == ParamStorage::flat) {
    // Rank 0 draws, everyone receives: one stream of draws, as a 1-rank run.
    if (host_.rank() == 0) ps_.initialize(seed);
    if (host_.size() > 1) device_.broadcast(ps_.params(), 0);
  } else {
    const HeldPieces w = weights();
    ps_.initialize(seed, w.pieces, w.local);
  }
  weights_changed();
}

void DataParallel::load_weights(const float* all) {
  const HeldPieces w = weights();
  for (const Shard& p : w.pieces)
    ps_.backend().copy(
        w.local.slice(w.packed(p.begin), {p.size()}),
        Tensor(const_cast<float*>(all) + p.begin, DType::f32, Device::cpu, {p.size()}));
  weights_changed();
}

uint64_t DataParallel::checksum() {
  return ps_.checksum();
}

double DataParallel::local_sum_squares() const {
  const Tensor my_grads = local_grads();
  if (my_grads.numel() == 0) return 0.0;
  Backend& be = ps_.backend();
  const int tp = ps_.tp().size;
  if (tp == 1) return be.sum_squares(my_grads);
  // Every tensor-parallel rank holds the same gradient of a replicated parameter: each counts
  // 1/tp of it, so the sum over the world counts it once (1/tp is exact for a power of two).
  double s = 0;
  int64_t packed = 0;
  for (const Shard& piece : opt_.pieces()) {
    for (int i = 0; i < static_cast<int>(ps_.infos().size()); ++i) {
      const ParamInfo& p = ps_.infos()[static_cast<size_t>(i)];
      const int64_t lo = std::max(piece.begin, p.offset);
      const int64_t hi = std::min(piece.end, p.offset + p.numel);
      if (lo >= hi) continue;
      const double sq = be.sum_squares(my_grads.slice(packed + lo - piece.begin, {hi - lo}));
      s += ps_.tp_replicated(i) ? sq / tp : sq;
    }
    packed += piece.size();
  }
  return s;
}

StepStats DataParallel::reduce_stats(double local_loss, bool stop_requested, StepTimes& t) {
  double stats[3] = {local_loss, local_sum_squares(), stop_requested ? 1.0 : 0.0};
  // Over the world: the loss is the same on every tensor-parallel rank of a data-parallel one,
  // and the squared norm adds each rank's parts.
  Communicator& everyone = mesh_.host();
  const int world = everyone.size();
  if (world > 1) {
    timed("allreduce loss+norm", t,
          [&] { everyone.allreduce_sum(Tensor(stats, DType::f64, Device::cpu, {3})); });
    stats[0] /= world;
    if (copies() > 1) stats[1] /= copies();
  }
  return StepStats{stats[0], std::sqrt(stats[1]), stats[2] != 0};
}

void DataParallel::update(double lr, int64_t step, double grad_norm, StepTimes& t) {
  // Clipping scales the gradients inside the update's pass (AdamWParams::grad_scale): a separate
  // scale() pass over them was 2% of a step on GPT-2-sized models (bench/RESULTS.md section 17).
  const bool clip = grad_clip_ > 0 && grad_norm > grad_clip_;
  opt_.step(local_params(), local_grads(), lr, step, clip ? grad_clip_ / (grad_norm + 1e-6) : 1.0);
  gather_params(t);
}

// AdamW's two moments by their names in a checkpoint.
std::vector<std::pair<std::string, Tensor>> DataParallel::moment_tensors() const {
  return {{"optimizer/m", opt_.m()}, {"optimizer/v", opt_.v()}};
}

void DataParallel::state_dict(StateDict& out) {
  out.put("parallel/zero", int64_t{stage()});
  out.put("parallel/dp_replicate", int64_t{mesh_.shape().dp_replicate});
  out.put("parallel/dp_shard", int64_t{mesh_.shape().dp_shard});
  out.put("parallel/tp", int64_t{mesh_.shape().tp});
  const std::vector<ParamEntry> params = ps_.entries();
  for (const auto& [prefix, moments] : moment_tensors()) {
    const HeldPieces held{opt_.pieces(), moments, copies(), copy_index()};
    add_flat_state(out, prefix, params, held.written(),
                   [this, held](int64_t at, int64_t n, float* o) {
                     ps_.backend().copy(Tensor(o, DType::f32, Device::cpu, {n}),
                                        held.local.slice(held.packed(at), {n}));
                   });
  }
}

void DataParallel::load_state_dict(StateSource& in) {
  const int64_t n = opt_.numel();
  const std::vector<ParamEntry> params = ps_.entries();
  StateBuffer host(static_cast<size_t>(n));  // every element is read below
  for (const auto& [prefix, moments] : moment_tensors()) {
    read_flat_state(in, prefix, params, opt_.pieces(), host.data());
    if (n > 0) ps_.backend().copy(moments, Tensor(host.data(), DType::f32, Device::cpu, {n}));
  }
}

namespace {

// Every rank holds every gradient and moment; buckets of gradients are summed while backward
// computes the rest.
class Ddp final : public DataParallel {
 public:
  Ddp(const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg, Tracer* tracer)
      : DataParallel(mesh, ps, cfg, {Shard{0, ps.numel()}}, tracer) {
    if (host_.size() > 1) sync_ = std::make_unique<GradSync>(device_, ps.grads(), kGradBucketElems);
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
  HeldPieces weights() const override { return replicated(ps_.params()); }
  void weights_changed() override { ps_.refresh_compute(); }

 protected:
  int copies() const override { return host_.size(); }
  int copy_index() const override { return host_.rank(); }
  int stage() const override { return 0; }
  Tensor local_params() const override { return ps_.params(); }
  Tensor local_grads() const override { return ps_.grads(); }
  void gather_params(StepTimes&) override {}

 private:
  std::unique_ptr<GradSync> sync_;
};

// Each rank of a dp_shard group owns shard_of(n) of the gradients, moments and update; the
// replica groups hold the same shards.
class Zero1 final : public DataParallel {
 public:
  Zero1(const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg, Tracer* tracer)
      : DataParallel(mesh, ps, cfg,
                     {shard_of(ps.numel(), mesh.shape().dp_shard, mesh.coord(MeshAxis::dp_shard))},
                     tracer),
        shard_group_(mesh.device_group(MeshAxis::dp_shard)),
        replicas_(mesh.device_group(MeshAxis::dp_replicate)) {}

  GradReadyFn grad_ready_hook() override { return {}; }
  void reduce_grads(StepTimes& t) override {
    if (shard_group_.size() > 1)
      timed("reduce_scatter", t, [&] { shard_group_.reduce_scatter_sum(ps_.grads()); });
    if (replicas_.size() > 1 && opt_.numel() > 0)
      timed("allreduce shard", t, [&] { replicas_.allreduce_sum(local_grads()); });
  }
  HeldPieces weights() const override { return replicated(ps_.params()); }
  void weights_changed() override { ps_.refresh_compute(); }

 protected:
  int copies() const override { return mesh_.shape().dp_replicate; }
  int copy_index() const override { return mesh_.coord(MeshAxis::dp_replicate); }
  int stage() const override { return 1; }
  Tensor local_params() const override { return mine(ps_.params()); }
  Tensor local_grads() const override { return mine(ps_.grads()); }
  void gather_params(StepTimes& t) override {
    if (shard_group_.size() > 1)
      timed("all_gather params", t, [&] { shard_group_.all_gather(ps_.params()); });
  }

 private:
  Tensor mine(Tensor flat) const {
    const Shard s = opt_.pieces().front();
    return flat.slice(s.begin, {s.size()});
  }

  Communicator& shard_group_;
  Communicator& replicas_;
};

}  // namespace

std::unique_ptr<DataParallel> DataParallel::make(int zero, const DeviceMesh& mesh, ParamStore& ps,
                                                 const OptimizerConfig& cfg, Tracer* tracer,
                                                 bool reshard_after_forward, bool reduce_bf16) {
  if (ps.storage() != storage_for(zero))
    throw std::logic_error("DataParallel::make: the model's parameter storage is not the stage's");
  if (zero >= 2)
    return make_sharded(zero, mesh, ps, cfg, tracer, reshard_after_forward, reduce_bf16);
  if (zero == 1) return std::make_unique<Zero1>(mesh, ps, cfg, tracer);
  return std::make_unique<Ddp>(mesh, ps, cfg, tracer);
}

}  // namespace trainrun
