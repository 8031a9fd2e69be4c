// Boxes of a tensor and the flat ranges they cut (box.h).
#include "trainrun/core/box.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace trainrun {

int64_t box_numel(const Box& b) {
  int64_t n = 1;
  for (int64_t s : b.sizes) n *= s;
  return n;
}

Box whole(const std::vector<int64_t>& shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), shape};
}

std::string box_str(const Box& b) {
  std::string out = "[";
  for (size_t d = 0; d < b.sizes.size(); ++d)
    out += fmt::format("{}{}:{}", d ? ", " : "", b.offsets[d], b.offsets[d] + b.sizes[d]);
  return out + "]";
}

namespace {

int64_t numel_from(const std::vector<int64_t>& shape, size_t dim) {
  int64_t n = 1;
  for (size_t d = dim; d < shape.size(); ++d) n *= shape[d];
  return n;
}

// The boxes of flat elements [begin, end) of the sub-tensor at `at` (its leading dimensions
// fixed by at.offsets[0..dim), each of size 1), appended to `out` in order.
void flat_boxes(const std::vector<int64_t>& shape, size_t dim, Box at, int64_t begin, int64_t end,
                std::vector<Box>* out) {
  if (begin >= end) return;
  const int64_t inner = numel_from(shape, dim + 1);  // elements per index of dimension `dim`
  auto rows = [&](int64_t first, int64_t count) {    // whole indices [first, first + count)
    Box b = at;
    b.offsets[dim] = first;
    b.sizes[dim] = count;
    for (size_t d = dim + 1; d < shape.size(); ++d) {
      b.offsets[d] = 0;
      b.sizes[d] = shape[d];
    }
    out->push_back(std::move(b));
  };
  auto within = [&](int64_t row, int64_t lo, int64_t hi) {  // part of one index, one level down
    Box b = at;
    b.offsets[dim] = row;
    b.sizes[dim] = 1;
    flat_boxes(shape, dim + 1, std::move(b), lo, hi, out);
  };
  if (begin % inner == 0 && end % inner == 0) return rows(begin / inner, (end - begin) / inner);
  const int64_t first = begin / inner, last = (end - 1) / inner;
  if (first == last) return within(first, begin - first * inner, end - first * inner);
  int64_t full_from = first;
  if (begin % inner != 0) {
    within(first, begin % inner, inner);
    full_from = first + 1;
  }
  const int64_t full_to = end / inner;
  if (full_to > full_from) rows(full_from, full_to - full_from);
  if (end % inner != 0) within(full_to, 0, end % inner);
}

}  // namespace

std::vector<Box> boxes_of_flat_range(const std::vector<int64_t>& shape, int64_t begin,
                                     int64_t end) {
  const int64_t n = numel_from(shape, 0);
  if (begin < 0 || end > n || begin > end)
    throw std::invalid_argument(fmt::format(
        "boxes_of_flat_range: [{}, {}) lies outside a tensor of {} elements", begin, end, n));
  std::vector<Box> out;
  if (begin == end) return out;
  if (shape.empty()) return {Box{}};  // a scalar: its one element
  flat_boxes(shape, 0, whole(shape), begin, end, &out);
  return out;
}

int64_t flat_start(const std::vector<int64_t>& shape, const Box& b) {
  int64_t at = 0;
  for (size_t d = 0; d < shape.size(); ++d) at = at * shape[d] + b.offsets[d];
  return at;
}

}  // namespace trainrun

#include "trainrun/core/param_entry.h"

namespace trainrun {

std::vector<PlacedBox> held_boxes(const ParamEntry& p, int64_t begin, int64_t end) {
  std::vector<PlacedBox> out;
  if (p.pieces.empty()) {
    for (Box& b : boxes_of_flat_range(p.shape, begin, end)) {
      const int64_t at = flat_start(p.shape, b);
      out.push_back({std::move(b), at});
    }
    return out;
  }
  int64_t first = 0;  // the current piece's first local element
  for (const Box& piece : p.pieces) {
    const int64_t n = box_numel(piece);
    const int64_t lo = std::max(begin, first), hi = std::min(end, first + n);
    if (lo < hi)
      for (Box& b : boxes_of_flat_range(piece.sizes, lo - first, hi - first)) {
        const int64_t at = first + flat_start(piece.sizes, b);
        for (size_t d = 0; d < b.offsets.size(); ++d) b.offsets[d] += piece.offsets[d];
        out.push_back({std::move(b), at});
      }
    first += n;
  }
  return out;
}

}  // namespace trainrun
