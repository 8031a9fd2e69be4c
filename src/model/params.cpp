#include "trainrun/model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "trainrun/core/rng.h"

namespace trainrun {

ParamStore::~ParamStore() {
  if (params_) be_.release(params_);
  if (grads_) be_.release(grads_);
  if (compute_) be_.release(compute_);
}

namespace {

// This rank's boxes of a tensor of `shape` split `split` over `tp` ranks (TpSplit).
std::vector<Box> tp_pieces(const std::vector<int64_t>& shape, const TpSplit& split,
                           const TensorParallel& tp, const std::string& name) {
  if (split.dim == TpSplit::Dim::none || tp.size == 1) return {};
  const auto d = static_cast<size_t>(split.dim == TpSplit::Dim::rows ? 0 : 1);
  if (shape.size() <= d)
    throw std::logic_error(fmt::format("ParamStore: {} has no dimension {} to split", name, d));
  std::vector<int64_t> blocks = split.blocks;
  if (blocks.empty()) blocks = {shape[d]};
  std::vector<Box> out;
  int64_t first = 0;
  for (int64_t rows : blocks) {
    const Shard s = shard_of(rows, tp.size, tp.rank);
    Box b = whole(shape);
    b.offsets[d] = first + s.begin;
    b.sizes[d] = s.size();
    out.push_back(std::move(b));
    first += rows;
  }
  if (first != shape[d])
    throw std::logic_error(fmt::format("ParamStore: {}'s blocks do not add up to its rows", name));
  return out;
}

}  // namespace

int ParamStore::declare(const std::string& name, std::vector<int64_t> shape, Init init, float std,
                        bool decay, const TpSplit& split) {
  if (allocated_) throw std::logic_error("ParamStore::declare after allocate");
  if (!names_.insert(name).second) throw std::logic_error("duplicate parameter name " + name);
  ParamInfo p;
  p.name = name;
  p.pieces = tp_pieces(shape, split, tp_, name);
  p.global_shape = shape;
  p.shape = std::move(shape);
  if (!p.pieces.empty()) {  // the blocks' boxes, stacked along the split dimension
    const auto d = static_cast<size_t>(split.dim == TpSplit::Dim::rows ? 0 : 1);
    p.shape[d] = 0;
    for (const Box& b : p.pieces) p.shape[d] += b.sizes[d];
  }
  p.numel = 1;
  for (int64_t d : p.shape) p.numel *= d;
  // A store whose first parameter comes before any begin_unit holds one unit of them all; it
  // must start here, at this parameter (opened after it, the unit began past its elements).
  if (units_.empty()) begin_unit("model");
  p.offset = total_;
  p.init = init;
  p.init_std = std;
  p.decay = decay;
  total_ += p.numel;
  infos_.push_back(std::move(p));
  ParamUnit& u = units_.back();
  u.last = static_cast<int>(infos_.size());
  u.end = total_;
  unit_of_.push_back(static_cast<int>(units_.size()) - 1);
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::begin_unit(const std::string& name) {
  if (allocated_) throw std::logic_error("ParamStore::begin_unit after allocate");
  if (!units_.empty() && units_.back().first == units_.back().last) {
    units_.back().name = name;
    return;
  }
  const int n = static_cast<int>(infos_.size());
  units_.push_back({name, n, n, total_, total_});
}

void ParamStore::allocate() {
  allocated_ = true;
  unit_params_.assign(units_.size(), nullptr);
  unit_grads_.assign(units_.size(), nullptr);
  if (storage_ == ParamStorage::external) return;
  const size_t bytes = static_cast<size_t>(total_) * dtype_size(master_dtype());
  params_ = be_.alloc(bytes);
  grads_ = be_.alloc(bytes);
  if (dtype_ == DType::bf16) compute_ = be_.alloc(static_cast<size_t>(total_) * 2);
  for (size_t u = 0; u < units_.size(); ++u) {
    const auto at = static_cast<size_t>(units_[u].begin);
    unit_params_[u] = static_cast<char*>(compute_ ? compute_ : params_) + at * dtype_size(dtype_);
    unit_grads_[u] = static_cast<char*>(grads_) + at * dtype_size(master_dtype());
  }
  be_.fill(params(), 0.0);
  be_.fill(grads(), 0.0);
  refresh_compute();
}

void ParamStore::bind_unit(int u, void* params, void* grads) {
  if (storage_ != ParamStorage::external)
    throw std::logic_error("ParamStore::bind_unit: the flat storage binds its units itself");
  unit_params_.at(static_cast<size_t>(u)) = static_cast<char*>(params);
  unit_grads_.at(static_cast<size_t>(u)) = static_cast<char*>(grads);
}

void ParamStore::begin_grads() {
  stale_.assign(infos_.size(), 1);
}

void ParamStore::begin_grads(int u) {
  if (stale_.size() != infos_.size()) stale_.assign(infos_.size(), 0);
  const ParamUnit& unit = units_.at(static_cast<size_t>(u));
  std::fill(stale_.begin() + unit.first, stale_.begin() + unit.last, uint8_t{1});
}

GradWrite ParamStore::grad_write(int i) {
  const auto k = static_cast<size_t>(i);
  if (k >= stale_.size() || !stale_[k]) return GradWrite::accumulate;
  stale_[k] = 0;
  return GradWrite::overwrite;
}

void ParamStore::zero_stale(int64_t begin, int64_t end) {
  for (size_t k = 0; k < stale_.size(); ++k) {
    const ParamInfo& p = infos_[k];
    if (!stale_[k] || p.offset + p.numel <= begin || p.offset >= end) continue;
    be_.fill(grad(static_cast<int>(k)), 0.0);
    stale_[k] = 0;
  }
}

Tensor ParamStore::compute_params() const {
  return compute_ ? flat(compute_, dtype_) : params();
}

void ParamStore::refresh_compute() {
  if (compute_ && total_ > 0) be_.copy(compute_params(), params());  // a cast: f32 -> bf16, RNE
}

void ParamStore::initialize(uint64_t seed) {
  initialize(seed, {Shard{0, total_}}, params());
  refresh_compute();
}

namespace {

// f(global_at, local_at, n) for each run of `b` along its last dimension: n elements contiguous
// in both the global tensor (of shape `global`, from flat index global_at) and the local one
// (from local_at).
template <class F>
void for_each_run(const PlacedBox& b, const std::vector<int64_t>& global, F f) {
  const size_t rank = b.box.sizes.size();
  const int64_t run = rank ? b.box.sizes.back() : 1;
  Box at{b.box.offsets, std::vector<int64_t>(rank, 1)};
  for (int64_t r = 0, runs = box_numel(b.box) / std::max<int64_t>(run, 1); r < runs; ++r) {
    f(flat_start(global, at), b.local + r * run, run);
    for (size_t d = rank ? rank - 1 : 0; d-- > 0;) {  // the next run: odometer, leading dims
      if (++at.offsets[d] < b.box.offsets[d] + b.box.sizes[d]) break;
      at.offsets[d] = b.box.offsets[d];
    }
  }
}

// Local elements [begin, begin + n) of parameter p (entry: its place) into `out`: the values the
// whole tensor has at their global positions. One stream per parameter, whole: its element k is
// the (2k)th and (2k+1)th draws, so a part of it (a ZeRO shard, a tensor-parallel slice) draws
// what a whole tensor would there.
void draw(const ParamInfo& p, const ParamEntry& entry, uint64_t seed, int64_t begin, int64_t n,
          double* out) {
  if (p.init != Init::normal) {
    std::fill(out, out + n, p.init == Init::ones ? 1.0 : 0.0);
    return;
  }
  for (const PlacedBox& b : held_boxes(entry, begin, begin + n))
    for_each_run(b, entry.global(), [&](int64_t global_at, int64_t local_at, int64_t run) {
      Rng rng(hash_combine(seed, hash_string(p.name)));
      rng.skip(2 * static_cast<uint64_t>(global_at));
      double* o = out + (local_at - begin);
      for (int64_t i = 0; i < run; ++i) o[i] = p.init_std * rng.normal();
    });
}

}  // namespace

void ParamStore::initialize(uint64_t seed, const std::vector<Shard>& pieces, Tensor out) const {
  // Drawn in double on the host, a chunk at a time, converted to the store's dtype and copied
  // to the device: a host copy of the whole model in double and again in float was a transient
  // of 12 bytes per parameter at start-up (1.5 GB for GPT-2 124M, on every rank).
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<double> value(static_cast<size_t>(std::min(total_, kChunk)));
  std::vector<float> f(dtype_ == DType::f64 ? 0 : value.size());
  int64_t packed = 0;  // where the current piece starts in `out`
  for (const Shard& piece : pieces) {
    for (const auto& p : infos_) {
      const int64_t lo = std::max(piece.begin, p.offset);
      const int64_t hi = std::min(piece.end, p.offset + p.numel);
      if (lo >= hi) continue;
      const ParamEntry entry{p.name, p.shape, p.offset, p.global_shape, p.pieces};
      for (int64_t at = lo; at < hi; at += kChunk) {
        const int64_t n = std::min(kChunk, hi - at);
        draw(p, entry, seed, at - p.offset, n, value.data());
        const Tensor dst = out.slice(packed + at - piece.begin, {n});
        if (dtype_ == DType::f64) {
          be_.copy(dst, Tensor(value.data(), DType::f64, Device::cpu, {n}));
        } else {
          std::copy(value.begin(), value.begin() + n, f.begin());
          be_.copy(dst, Tensor(f.data(), DType::f32, Device::cpu, {n}));
        }
      }
    }
    packed += piece.size();
  }
}

Tensor ParamStore::flat(void* p, DType dt) const {
  if (storage_ == ParamStorage::external)
    throw std::logic_error(
        "ParamStore: the flat buffers of a store with external storage (ZeRO-2/3) do not exist");
  return Tensor(p, dt, be_.device(), {total_});
}

Tensor ParamStore::view(const std::vector<char*>& unit_base, DType dt, int i,
                        const char* what) const {
  const ParamInfo& p = infos_.at(static_cast<size_t>(i));
  const auto u = static_cast<size_t>(unit_of_[static_cast<size_t>(i)]);
  if (u >= unit_base.size() || !unit_base[u])
    throw std::logic_error(fmt::format("ParamStore: the {} of {} used while unit {} is not bound",
                                       what, p.name, units_[u].name));
  Tensor t(unit_base[u] + static_cast<size_t>(p.offset - units_[u].begin) * dtype_size(dt), dt,
           be_.device(), {p.numel});
  t.ndim = static_cast<int>(p.shape.size());
  for (int d = 0; d < t.ndim; ++d) t.dims[d] = p.shape[d];
  return t;
}

Tensor ParamStore::param(int i) const {
  return view(unit_params_, dtype_, i, "parameter");
}

Tensor ParamStore::grad(int i) const {
  return view(unit_grads_, master_dtype(), i, "gradient");
}

std::vector<ParamEntry> ParamStore::entries() const {
  std::vector<ParamEntry> out;
  out.reserve(infos_.size());
  for (const auto& p : infos_)
    out.push_back(
        {p.name, p.shape, p.offset, p.global_shape, p.pieces, p.pieces.empty() && tp_.rank != 0});
  return out;
}

std::vector<ParamEntry> ParamStore::whole_entries() const {
  std::vector<ParamEntry> out;
  int64_t at = 0;
  for (const auto& p : infos_) {
    out.push_back({p.name, p.global_shape, at});
    int64_t n = 1;
    for (int64_t d : p.global_shape) n *= d;
    at += n;
  }
  return out;
}

void ParamStore::take_part(const float* whole, float* local) const {
  const std::vector<ParamEntry> all = whole_entries(), mine = entries();
  for (size_t i = 0; i < mine.size(); ++i) {
    const ParamEntry& e = mine[i];
    const std::vector<int64_t>& global = e.global();
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    for (const PlacedBox& b : held_boxes(e, 0, n))
      for_each_run(b, global, [&](int64_t global_at, int64_t local_at, int64_t run) {
        std::copy_n(whole + all[i].offset + global_at, run, local + e.offset + local_at);
      });
  }
}

Arena::~Arena() {
  if (base_) be_.release(base_);
}

Tensor Arena::take(DType dt, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dt, be_.device(), shape);
  size_t bytes = (t.bytes() + 63) & ~size_t{63};  // keep every buffer 64-byte aligned
  if (measured_) {
    if (offset_ + bytes > high_)
      throw std::logic_error(fmt::format("Arena: second pass asks more than measured ({} > {})",
                                         offset_ + bytes, high_));
    t.data = base_ + offset_;
  }
  offset_ += bytes;
  if (!measured_ && offset_ > high_) high_ = offset_;
  return t;
}

void Arena::allocate() {
  measured_ = true;
  offset_ = 0;
  if (high_ > 0) base_ = static_cast<char*>(be_.alloc(high_));
}

void Arena::zero(size_t begin, size_t end) {
  if (!base_ || end <= begin) return;
  // Zero bits are 0.0 in every float dtype, so one f32 fill covers any buffer mix.
  be_.fill(
      Tensor(base_ + begin, DType::f32, be_.device(), {static_cast<int64_t>((end - begin) / 4)}),
      0.0);
}

uint64_t ParamStore::checksum() const {
  return checksum_continue(0, be_, params());
}

uint64_t checksum_continue(uint64_t h, Backend& be, Tensor all) {
  // Through a host buffer of 1 Mi floats: a copy of all the weights was a transient of 4 bytes
  // per parameter at the end of every run, the peak of its resident set (bench/RESULTS.md 23).
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t total = all.numel();
  std::vector<float> host(static_cast<size_t>(std::min(total, kChunk)));
  for (int64_t off = 0; off < total; off += kChunk) {
    const int64_t n = std::min(kChunk, total - off);
    be.copy(Tensor(host.data(), DType::f32, Device::cpu, {n}), all.slice(off, {n}));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &host[static_cast<size_t>(i)], 4);
      h = hash_combine(h, bits);
    }
  }
  return h;
}

}  // namespace trainrun
