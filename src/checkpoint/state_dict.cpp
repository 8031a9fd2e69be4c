// Boxes, flat ranges and the flat-buffer components' state (state_dict.h, box_copy.h).
#include "trainrun/checkpoint/state_dict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "box_copy.h"
#include "trainrun/core/errors.h"

namespace trainrun {

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

}  // namespace

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box o;
  for (size_t d = 0; d < a.sizes.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo) return std::nullopt;
    o.offsets.push_back(lo);
    o.sizes.push_back(hi - lo);
  }
  return o;
}

int64_t offset_within(const Box& inner, const Box& outer) {
  int64_t at = 0;
  for (size_t d = 0; d < outer.sizes.size(); ++d)
    at = at * outer.sizes[d] + (inner.offsets[d] - outer.offsets[d]);
  return at;
}

bool contiguous_within(const Box& inner, const Box& outer) {
  size_t d = 0;
  while (d < inner.sizes.size() && inner.sizes[d] == 1) ++d;
  for (++d; d < inner.sizes.size(); ++d)
    if (inner.sizes[d] != outer.sizes[d]) return false;
  return true;
}

void copy_overlap(const Box& src_box, const float* src, const Box& dst_box, float* dst) {
  const std::optional<Box> o = intersect(src_box, dst_box);
  if (!o) return;
  const size_t rank = o->sizes.size();
  if (rank == 0) {
    *dst = *src;
    return;
  }
  // Runs along the last dimension; `idx` walks the overlap's leading dimensions.
  const int64_t run = o->sizes[rank - 1];
  std::vector<int64_t> idx(o->offsets.begin(), o->offsets.end());
  Box point{idx, std::vector<int64_t>(rank, 1)};
  for (;;) {
    point.offsets = idx;
    std::memcpy(dst + offset_within(point, dst_box), src + offset_within(point, src_box),
                static_cast<size_t>(run) * sizeof(float));
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++idx[d] < o->offsets[d] + o->sizes[d]) break;
      idx[d] = o->offsets[d];
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

size_t StateDict::declare(std::string name, std::vector<int64_t> shape) {
  tensors_.push_back({std::move(name), std::move(shape)});
  return tensors_.size() - 1;
}

void StateDict::add(size_t tensor, Box box, Fill fill) {
  if (tensor >= tensors_.size()) throw std::logic_error("StateDict::add: undeclared tensor");
  if (box_numel(box) == 0) return;
  slices_.push_back({tensor, std::move(box), std::move(fill)});
}

void StateDict::put(std::string name, StateValue value) {
  for (const NamedValue& v : values_)
    if (v.name == name)
      throw std::invalid_argument(fmt::format("StateDict::put: value {} put twice", name));
  values_.push_back({std::move(name), value});
}

namespace {

const StateValue& find_value(const std::vector<NamedValue>& values, const std::string& name,
                             const std::string& where) {
  for (const NamedValue& v : values)
    if (v.name == name) return v.value;
  throw CheckpointError(fmt::format(
      "{} holds no value {}: it was written by another program or a trainrun that did not "
      "record it",
      where, name));
}

std::string value_str(const StateValue& v) {
  return std::visit([](auto x) { return fmt::format("{}", x); }, v);
}

[[noreturn]] void not_a(const char* what, const std::string& where, const std::string& name,
                        const StateValue& v) {
  throw CheckpointError(
      fmt::format("{}: value {} is {}, which is not {}", where, name, value_str(v), what));
}

}  // namespace

int64_t read_int(const std::vector<NamedValue>& values, const std::string& name,
                 const std::string& where) {
  const StateValue& v = find_value(values, name, where);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v);
      u && *u <= uint64_t(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(*u);
  not_a("a 64-bit integer", where, name, v);
}

uint64_t read_uint(const std::vector<NamedValue>& values, const std::string& name,
                   const std::string& where) {
  const StateValue& v = find_value(values, name, where);
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v); i && *i >= 0) return static_cast<uint64_t>(*i);
  not_a("an unsigned 64-bit integer", where, name, v);
}

double read_double(const std::vector<NamedValue>& values, const std::string& name,
                   const std::string& where) {
  return std::visit([](auto x) { return static_cast<double>(x); }, find_value(values, name, where));
}

void add_flat_state(StateDict& out, const std::string& prefix,
                    const std::vector<ParamEntry>& params, const std::vector<Shard>& ranges,
                    const std::function<void(int64_t, int64_t, float*)>& copy) {
  for (const ParamEntry& p : params) {
    const size_t t = out.declare(prefix + "/" + p.name, p.global());
    if (p.tp_copy) continue;
    const int64_t n = numel_of(p.shape);
    for (const Shard& range : ranges) {
      const int64_t lo = std::max(range.begin, p.offset), hi = std::min(range.end, p.offset + n);
      if (lo >= hi) continue;
      for (PlacedBox& b : held_boxes(p, lo - p.offset, hi - p.offset)) {
        const int64_t at = p.offset + b.local, count = box_numel(b.box);
        out.add(t, std::move(b.box), [copy, at, count](float* dst) { copy(at, count, dst); });
      }
    }
  }
}

void read_flat_state(StateSource& in, const std::string& prefix,
                     const std::vector<ParamEntry>& params, const std::vector<Shard>& ranges,
                     float* out) {
  std::set<std::string> mine;
  std::vector<SliceRequest> requests;
  for (const ParamEntry& p : params) {
    const std::string name = prefix + "/" + p.name;
    mine.insert(name);
    std::vector<int64_t> shape;
    if (!in.shape_of(name, &shape))
      throw CheckpointError(fmt::format(
          "checkpoint {} does not match the model: it holds no tensor {} (the model's has shape "
          "{}); it was written by another model or configuration",
          in.path(), name, box_str(whole(p.global()))));
    if (shape != p.global())
      throw CheckpointError(fmt::format(
          "checkpoint {} does not match the model at {}: the checkpoint's tensor is {}, the "
          "model's {}",
          in.path(), name, box_str(whole(shape)), box_str(whole(p.global()))));
    const int64_t n = numel_of(p.shape);
    int64_t packed = 0;  // where `range` starts in out
    for (const Shard& range : ranges) {
      const int64_t lo = std::max(range.begin, p.offset), hi = std::min(range.end, p.offset + n);
      if (lo < hi)
        for (PlacedBox& b : held_boxes(p, lo - p.offset, hi - p.offset)) {
          float* dst = out + (packed + p.offset + b.local - range.begin);
          requests.push_back({name, std::move(b.box), dst});
        }
      packed += range.size();
    }
  }
  for (const std::string& name : in.tensor_names())
    if (name.starts_with(prefix + "/") && !mine.contains(name))
      throw CheckpointError(fmt::format(
          "checkpoint {} does not match the model: it holds {}, which the model does not have",
          in.path(), name));
  in.read(requests);
}

}  // namespace trainrun
