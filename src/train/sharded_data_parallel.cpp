#include "sharded_data_parallel.h"

#include <deque>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm_stream.h"

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
                      Tracer* tracer, bool reshard_after_forward, DType reduce_dtype)
      : DataParallel(mesh, ps, cfg, unit_pieces(ps, mesh), tracer),
        shard_params_(zero == 3),
        reshard_after_forward_(reshard_after_forward),
        reduce_dtype_(reduce_dtype),
        group_(mesh.device_group(MeshAxis::dp_shard)),
        replicas_(mesh.device_group(MeshAxis::dp_replicate)),
        be_(ps.backend()),
        pool_(ps.backend()),
        units_(ps.units()),
        master_(be_, bytes(ps.master_dtype(), opt_.numel())),
        grads_(be_, bytes(ps.master_dtype(), opt_.numel())),
        stream_(tracer) {
    int64_t at = 0;
    for (const Shard& p : opt_.pieces()) {
      packed_.push_back(at);
      at += p.size();
    }
    if (ps.dtype() != ps.master_dtype())
      compute_ = DeviceBuffer(be_, bytes(ps.dtype(), opt_.numel()));
    held_.assign(units_.size(), 0);
    kept_.assign(units_.size(), 0);
    gathering_.assign(units_.size(), std::nullopt);
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

  // The model's brackets. ZeRO-3 prefetches: acquiring a unit queues the gather of the next one
  // in the pass's order (forward up, backward down), which then runs while this one computes.
  void acquire(int u, Pass pass) override {
    const auto k = static_cast<size_t>(u);
    if (shard_params_) {
      if (held_[k]++ == 0) {
        if (!gathering_[k]) start_gather(u);
        const double t0 = now();
        waited_ += wait_for(*gathering_[k]);
        gathering_[k].reset();
        // The step loop's side of the gather: from here its weights are needed.
        if (tracer_) tracer_->span(span("need", u).c_str(), "comm_wait", t0, now());
      }
      prefetch(pass == Pass::forward ? u + 1 : u - 1);
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
      start_reduce(u);
      grad_bufs_[k] = nullptr;
    }
    if (shard_params_) {
      // Not resharded after the forward: the forward's hold is kept (once) until the backward.
      if (pass == Pass::forward && !reshard_after_forward_ && !kept_[k]) {
        kept_[k] = 1;
      } else {
        if (pass == Pass::backward && kept_[k]) {
          kept_[k] = 0;
          --held_[k];
        }
        unhold(u);
      }
    }
    ps_.bind_unit(u, params_[k], grad_bufs_[k]);
  }

  void begin_step() override { be_.fill(local_grads(), 0.0); }
  StateBuffers buffers() const override {
    return {local_params(), local_grads(), compute_pieces()};
  }
  GradReadyFn grad_ready_hook() override { return {}; }  // the brackets reduce
  void reduce_grads(StepTimes& t) override {
    finish_reduces(0);
    if (replicas_.size() > 1 && opt_.numel() > 0)
      run("allreduce shard", [this, g = local_grads()] { replicas_.allreduce_sum(g); });
    account(t);
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
      const Tensor whole(buf, ps_.master_dtype(), be_.device(), {n});
      gather_into(static_cast<int>(u), whole, local_params());
      waited_ += wait_for(stream_.last());
      h = checksum_continue(h, be_, whole);
      pool_.give(buf);
    }
    return h;
  }

 protected:
  int copies() const override { return mesh_.shape().dp_replicate; }
  int copy_index() const override { return mesh_.coord(MeshAxis::dp_replicate); }
  int stage() const override { return shard_params_ ? 3 : 2; }
  Tensor local_params() const override { return packed(master_, ps_.master_dtype()); }
  Tensor local_grads() const override { return packed(grads_, ps_.master_dtype()); }
  void gather_params(StepTimes& t) override {
    refresh();
    account(t);
  }

 private:
  // A unit's gradients on their way to this rank's shard (in reduce_dtype_): done when the
  // ticket is.
  struct Reduce {
    int unit;
    CommStream::Ticket ticket;
    void* buf;
  };
  // Reduce-scatters in flight at most, each holding its unit's gradient buffer: enough to
  // overlap the next units' backward, bounded so no whole gradient buffer builds up.
  static constexpr size_t kReducesInFlight = 2;

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
  std::string span(const char* what, int u) const {
    return std::string(what) + " " + units_[static_cast<size_t>(u)].name;
  }

  // Blocks until ticket t is done; a wait that blocks is a wait in a collective for the
  // watchdog (on_collective_wait).
  double wait_for(CommStream::Ticket t) {
    if (stream_.done(t) || !wait_fn_) return stream_.wait(t);
    wait_fn_(true);
    const double s = stream_.wait(t);
    wait_fn_(false);
    return s;
  }
  // A collective through the stream, waited for.
  template <class F>
  void run(const char* name, F&& collective) {
    waited_ += wait_for(stream_.submit(name, std::forward<F>(collective)));
  }
  // The step's communication: what the loop waited for, and what the stream spent.
  void account(StepTimes& t) {
    t.comm_wait += std::exchange(waited_, 0.0);
    t.comm_total += stream_.take_busy_seconds();
  }

  // Queues unit u's whole weights into `whole` from every rank's `pieces` (this rank's copy is
  // made now, the rest on the stream).
  void gather_into(int u, const Tensor& whole, const Tensor& pieces) {
    const Shard p = part(u);
    if (p.size() > 0)
      be_.copy(whole.slice(p.begin, {p.size()}),
               pieces.slice(packed_[static_cast<size_t>(u)], {p.size()}));
    if (group_.size() > 1)
      stream_.submit(span("all_gather", u), [this, whole] { group_.all_gather(whole); });
  }
  // ZeRO-3: a working buffer for unit u, its gather queued.
  void start_gather(int u) {
    const auto k = static_cast<size_t>(u);
    params_[k] = pool_.take(bytes(ps_.dtype(), units_[k].numel()));
    gather_into(u, Tensor(params_[k], ps_.dtype(), be_.device(), {units_[k].numel()}),
                compute_pieces());
    gathering_[k] = stream_.last();
  }
  void prefetch(int u) {
    if (u < 0 || u >= static_cast<int>(units_.size())) return;
    const auto k = static_cast<size_t>(u);
    if (held_[k] == 0 && !gathering_[k]) start_gather(u);
  }
  void unhold(int u) {
    const auto k = static_cast<size_t>(u);
    if (--held_[k] > 0) return;
    pool_.give(params_[k]);
    params_[k] = nullptr;
  }
  // Gathers queued ahead of an acquire that has not come, and weights kept from a forward
  // without its backward (an evaluation's), dropped: they are stale once the masters change.
  void drop_prefetched() {
    for (size_t k = 0; k < units_.size(); ++k)
      if (kept_[k]) {
        kept_[k] = 0;
        unhold(static_cast<int>(k));
        ps_.bind_unit(static_cast<int>(k), params_[k], grad_bufs_[k]);
      }
    for (size_t k = 0; k < units_.size(); ++k) {
      if (!gathering_[k]) continue;
      waited_ += wait_for(*gathering_[k]);
      gathering_[k].reset();
      pool_.give(params_[k]);
      params_[k] = nullptr;
    }
  }

  // Unit u's gradients of this micro-batch: their reduce-scatter over the group queued; the
  // piece it leaves here is added to the step's gradient shard when it is done.
  void start_reduce(int u) {
    const auto k = static_cast<size_t>(u);
    const ParamUnit& unit = units_[k];
    ps_.zero_stale(unit.begin, unit.end);
    void* buf = grad_bufs_[k];
    Tensor g(buf, ps_.master_dtype(), be_.device(), {unit.numel()});
    if (reduce_dtype_ != ps_.master_dtype()) {
      // Reduced in bf16: rounded into a buffer of half the size, the f32 one free at once.
      buf = pool_.take(bytes(reduce_dtype_, unit.numel()));
      const Tensor low(buf, reduce_dtype_, be_.device(), {unit.numel()});
      be_.copy(low, g);
      pool_.give(grad_bufs_[k]);
      g = low;
    }
    if (group_.size() > 1)
      stream_.submit(span("reduce_scatter", u), [this, g] { group_.reduce_scatter_sum(g); });
    reduces_.push_back({u, stream_.last(), buf});
    finish_reduces(kReducesInFlight);
  }
  // Completes reduce-scatters, oldest first (a unit's micro-batches add in order): those done
  // already, and then enough to leave at most `in_flight`.
  void finish_reduces(size_t in_flight) {
    while (!reduces_.empty() &&
           (reduces_.size() > in_flight || stream_.done(reduces_.front().ticket))) {
      const Reduce r = reduces_.front();
      reduces_.pop_front();
      waited_ += wait_for(r.ticket);
      const Shard p = part(r.unit);
      if (p.size() > 0) {
        const Tensor g(r.buf, reduce_dtype_, be_.device(),
                       {units_[static_cast<size_t>(r.unit)].numel()});
        const Tensor mine = local_grads().slice(packed_[static_cast<size_t>(r.unit)], {p.size()});
        Tensor slice = g.slice(p.begin, {p.size()});
        void* wide = nullptr;
        if (reduce_dtype_ != ps_.master_dtype()) {  // widened to f32 before the add
          wide = pool_.take(bytes(ps_.master_dtype(), p.size()));
          const Tensor w(wide, ps_.master_dtype(), be_.device(), {p.size()});
          be_.copy(w, slice);
          slice = w;
        }
        be_.add(mine, mine, slice);
        if (wide) pool_.give(wide);
      }
      pool_.give(r.buf);
    }
  }

  // After the masters changed: the compute pieces rounded from them, and ZeRO-2's gathered
  // weights all-gathered again.
  void refresh() {
    drop_prefetched();
    if (compute_.data() && opt_.numel() > 0) be_.copy(compute_pieces(), local_params());
    if (shard_params_) return;
    for (size_t u = 0; u < units_.size(); ++u)
      gather_into(static_cast<int>(u),
                  Tensor(params_[u], ps_.dtype(), be_.device(), {units_[u].numel()}),
                  compute_pieces());
    waited_ += wait_for(stream_.last());
  }

  const bool shard_params_;  // ZeRO-3; ZeRO-2 keeps them gathered
  const bool reshard_after_forward_;
  const DType reduce_dtype_;  // the gradients' in their reduce-scatters
  Communicator& group_;       // dp_shard: where units are gathered and reduced
  Communicator& replicas_;    // dp_replicate: the groups that hold the same pieces
  Backend& be_;
  BufferPool pool_;
  const std::vector<ParamUnit> units_;
  std::vector<int64_t> packed_;  // unit u's piece in the packed buffers
  DeviceBuffer master_, grads_;  // this rank's pieces: f32 masters and summed gradients
  DeviceBuffer compute_;         // their compute-dtype copy (bf16 runs only)
  DeviceBuffer gathered_;        // ZeRO-2: every unit's weights
  std::vector<int> held_;        // ZeRO-3: acquires not yet released, per unit
  std::vector<char> kept_;       // ZeRO-3: a forward's hold kept for the backward, per unit
  // ZeRO-3: per unit, the gather into params_ queued and not yet waited for (a prefetch).
  std::vector<std::optional<CommStream::Ticket>> gathering_;
  std::vector<void*> params_, grad_bufs_;  // per unit: bound weights and gradients, or null
  std::deque<Reduce> reduces_;             // in flight, oldest first
  double waited_ = 0;                      // seconds the step loop waited for the stream
  // Last: destroyed first, it runs what was queued while the buffers above still exist.
  CommStream stream_;
};

}  // namespace

std::unique_ptr<DataParallel> make_sharded(int zero, const DeviceMesh& mesh, ParamStore& ps,
                                           const OptimizerConfig& cfg, Tracer* tracer,
                                           bool reshard_after_forward, bool reduce_bf16) {
  if (zero != 2 && zero != 3) throw std::logic_error("make_sharded: zero is 2 or 3");
  return std::make_unique<ShardedDataParallel>(zero, mesh, ps, cfg, tracer, reshard_after_forward,
                                               reduce_bf16 ? DType::bf16 : ps.master_dtype());
}

}  // namespace trainrun
