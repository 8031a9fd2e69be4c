#include "sharded_data_parallel.h"

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace trainrun {

namespace {

// Device buffers by size, reused: a unit's working buffer is taken at its acquire and given back
// at its release. The blocks are one size, so a step allocates nothing after the first.
class BufferPool {
 public:
  explicit BufferPool(Backend& be) : be_(be) {}
  void* take(size_t bytes) {
    DeviceBuffer b;
    if (auto it = free_.find(bytes); it != free_.end()) {
      b = std::move(it->second);
      free_.erase(it);
    } else {
      b = DeviceBuffer(be_, bytes);
    }
    void* p = b.data();
    used_.emplace(p, std::make_pair(bytes, std::move(b)));
    return p;
  }
  void give(void* p) {
    auto node = used_.extract(p);
    if (node.empty()) throw std::logic_error("BufferPool::give: a buffer it did not hand out");
    free_.emplace(node.mapped().first, std::move(node.mapped().second));
  }

 private:
  Backend& be_;
  std::multimap<size_t, DeviceBuffer> free_;
  std::map<void*, std::pair<size_t, DeviceBuffer>> used_;
};

// This rank's slice of every unit: shard_of(unit size) over the dp_shard group.
std::vector<Shard> unit_pieces(const ParamStore& ps, const DeviceMesh& mesh) {
  std::vector<Shard> out;
  for (const ParamUnit& u : ps.units()) {
    const Shard part = shard_of(u.numel(), mesh.shape().dp_shard, mesh.coord(MeshAxis::dp_shard));
    out.push_back({u.begin + part.begin, u.begin + part.end});
  }
  return out;
}

class ShardedDataParallel final : public DataParallel, public UnitResidency {
 public:
  ShardedDataParallel(int zero, const DeviceMesh& mesh, ParamStore& ps, const OptimizerConfig& cfg,
                      Tracer* tracer)
      : DataParallel(mesh, ps, cfg, unit_pieces(ps, mesh), tracer),
        shard_params_(zero == 3),
        group_(mesh.device_group(MeshAxis::dp_shard)),
        replicas_(mesh.device_group(MeshAxis::dp_replicate)),
        be_(ps.backend()),
        pool_(ps.backend()),
        units_(ps.units()),
        master_(be_, bytes(ps.master_dtype(), opt_.numel())),
        grads_(be_, bytes(ps.master_dtype(), opt_.numel())) {
    int64_t at = 0;
    for (const Shard& p : opt_.pieces()) {
      packed_.push_back(at);
      at += p.size();
    }
    if (ps.dtype() != ps.master_dtype())
      compute_ = DeviceBuffer(be_, bytes(ps.dtype(), opt_.numel()));
    held_.assign(units_.size(), 0);
    params_.assign(units_.size(), nullptr);
    grad_bufs_.assign(units_.size(), nullptr);
    if (!shard_params_) {
      // ZeRO-2: every unit's weights stay gathered, in one buffer laid out as the flat one.
      gathered_ = DeviceBuffer(be_, bytes(ps.dtype(), ps.numel()));
      for (size_t u = 0; u < units_.size(); ++u) {
        params_[u] = static_cast<char*>(gathered_.data()) + bytes(ps.dtype(), units_[u].begin);
        ps.bind_unit(static_cast<int>(u), params_[u], nullptr);
      }
    }
    be_.fill(local_grads(), 0.0);
    ps.set_residency(this);
  }
  ~ShardedDataParallel() override { ps_.set_residency(nullptr); }

  // The model's brackets.
  void acquire(int u, Pass pass) override {
    const auto k = static_cast<size_t>(u);
    if (shard_params_ && held_[k]++ == 0) {
      params_[k] = pool_.take(bytes(ps_.dtype(), units_[k].numel()));
      gather(u, params_[k], "all_gather unit");
    }
    if (pass == Pass::backward) {
      grad_bufs_[k] = pool_.take(bytes(ps_.master_dtype(), units_[k].numel()));
      ps_.begin_grads(u);  // the buffer's old contents are overwritten by the first writes
    }
    ps_.bind_unit(u, params_[k], grad_bufs_[k]);
  }

  void release(int u, Pass pass) override {
    const auto k = static_cast<size_t>(u);
    if (pass == Pass::backward) {
      reduce(u);
      pool_.give(grad_bufs_[k]);
      grad_bufs_[k] = nullptr;
    }
    if (shard_params_ && --held_[k] == 0) {
      pool_.give(params_[k]);
      params_[k] = nullptr;
    }
    ps_.bind_unit(u, params_[k], grad_bufs_[k]);
  }

  void begin_step() override { be_.fill(local_grads(), 0.0); }
  StateBuffers buffers() const override {
    return {local_params(), local_grads(), compute_pieces()};
  }
  GradReadyFn grad_ready_hook() override { return {}; }  // the brackets reduce
  void reduce_grads(StepTimes& t) override {
    if (replicas_.size() > 1 && opt_.numel() > 0)
      comm("allreduce shard", [&] { replicas_.allreduce_sum(local_grads()); });
    t.comm_wait += comm_seconds_;  // every collective here blocks: none is hidden
    t.comm_total += comm_seconds_;
    comm_seconds_ = 0;
  }

  HeldPieces weights() const override {
    return {opt_.pieces(), local_params(), copies(), copy_index()};
  }
  void weights_changed() override { refresh(); }

  uint64_t checksum() override {
    // The masters gathered a unit at a time, hashed in flat order: the replicated value.
    uint64_t h = 0;
    for (size_t u = 0; u < units_.size(); ++u) {
      const int64_t n = units_[u].numel();
      void* buf = pool_.take(bytes(ps_.master_dtype(), n));
      gather_masters(static_cast<int>(u), buf);
      h = checksum_continue(h, be_, Tensor(buf, ps_.master_dtype(), be_.device(), {n}));
      pool_.give(buf);
    }
    return h;
  }

 protected:
  int copies() const override { return mesh_.shape().dp_replicate; }
  int copy_index() const override { return mesh_.coord(MeshAxis::dp_replicate); }
  Tensor local_params() const override { return packed(master_, ps_.master_dtype()); }
  Tensor local_grads() const override { return packed(grads_, ps_.master_dtype()); }
  void gather_params(StepTimes& t) override {
    const double before = comm_seconds_;
    refresh();
    t.comm_wait += comm_seconds_ - before;
    t.comm_total += comm_seconds_ - before;
    comm_seconds_ = before;
  }

 private:
  static size_t bytes(DType dt, int64_t n) { return static_cast<size_t>(n) * dtype_size(dt); }
  Tensor packed(const DeviceBuffer& b, DType dt) const {
    return Tensor(b.data(), dt, be_.device(), {opt_.numel()});
  }
  // This rank's pieces in the compute dtype: the masters, or their bf16 rounding.
  Tensor compute_pieces() const {
    return compute_.data() ? packed(compute_, ps_.dtype()) : local_params();
  }
  // Unit u's part in this rank's pieces, and where it sits inside the unit.
  Shard part(int u) const {
    const auto k = static_cast<size_t>(u);
    return {opt_.pieces()[k].begin - units_[k].begin, opt_.pieces()[k].end - units_[k].begin};
  }

  template <class F>
  void comm(const char* span, F&& collective) {
    const double t0 = now();
    collective();
    const double t1 = now();
    trace(span, t0, t1);
    comm_seconds_ += t1 - t0;
  }

  // Unit u's whole weights into `dst` (compute dtype) from every rank's pieces.
  void gather(int u, void* dst, const char* span) {
    const Shard p = part(u);
    const Tensor whole(dst, ps_.dtype(), be_.device(), {units_[static_cast<size_t>(u)].numel()});
    if (p.size() > 0)
      be_.copy(whole.slice(p.begin, {p.size()}),
               compute_pieces().slice(packed_[static_cast<size_t>(u)], {p.size()}));
    if (group_.size() > 1) comm(span, [&] { group_.all_gather(whole); });
  }
  // The same from the f32 masters (the checksum).
  void gather_masters(int u, void* dst) {
    const Shard p = part(u);
    const Tensor whole(dst, ps_.master_dtype(), be_.device(),
                       {units_[static_cast<size_t>(u)].numel()});
    if (p.size() > 0)
      be_.copy(whole.slice(p.begin, {p.size()}),
               local_params().slice(packed_[static_cast<size_t>(u)], {p.size()}));
    if (group_.size() > 1) group_.all_gather(whole);
  }
  // Unit u's gradients of this micro-batch: summed over the group into this rank's piece,
  // which adds them to the step's gradient shard.
  void reduce(int u) {
    const auto k = static_cast<size_t>(u);
    const ParamUnit& unit = units_[k];
    ps_.zero_stale(unit.begin, unit.end);
    const Tensor g(grad_bufs_[k], ps_.master_dtype(), be_.device(), {unit.numel()});
    if (group_.size() > 1) comm("reduce_scatter unit", [&] { group_.reduce_scatter_sum(g); });
    const Shard p = part(u);
    if (p.size() == 0) return;
    const Tensor mine = local_grads().slice(packed_[k], {p.size()});
    be_.add(mine, mine, g.slice(p.begin, {p.size()}));
  }
  // After the masters changed: the compute pieces rounded from them, and ZeRO-2's gathered
  // weights all-gathered again.
  void refresh() {
    if (compute_.data() && opt_.numel() > 0) be_.copy(compute_pieces(), local_params());
    if (!shard_params_)
      for (size_t u = 0; u < units_.size(); ++u)
        gather(static_cast<int>(u), params_[u], "all_gather params");
  }

  const bool shard_params_;  // ZeRO-3; ZeRO-2 keeps them gathered
  Communicator& group_;      // dp_shard: where units are gathered and reduced
  Communicator& replicas_;   // dp_replicate: the groups that hold the same pieces
  Backend& be_;
  BufferPool pool_;
  const std::vector<ParamUnit> units_;
  std::vector<int64_t> packed_;            // unit u's piece in the packed buffers
  DeviceBuffer master_, grads_;            // this rank's pieces: f32 masters and summed gradients
  DeviceBuffer compute_;                   // their compute-dtype copy (bf16 runs only)
  DeviceBuffer gathered_;                  // ZeRO-2: every unit's weights
  std::vector<int> held_;                  // ZeRO-3: acquires not yet released, per unit
  std::vector<void*> params_, grad_bufs_;  // per unit: bound weights and gradients, or null
  double comm_seconds_ = 0;                // in collectives since the last reduce_grads
};

}  // namespace

std::unique_ptr<DataParallel> make_sharded(int zero, const DeviceMesh& mesh, ParamStore& ps,
                                           const OptimizerConfig& cfg, Tracer* tracer) {
  if (zero != 2 && zero != 3) throw std::logic_error("make_sharded: zero is 2 or 3");
  return std::make_unique<ShardedDataParallel>(zero, mesh, ps, cfg, tracer);
}

}  // namespace trainrun
