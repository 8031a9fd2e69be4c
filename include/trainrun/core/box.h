// Boxes of a tensor: the unit in which checkpoints store slices (checkpoint/state_dict.h) and
// in which a tensor-parallel rank holds its part of a parameter (param_entry.h). Pure
// functions: thread safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

// A box of a global tensor: [offsets[d], offsets[d] + sizes[d]) in every dimension d. The whole
// tensor is {zeros, shape}. Elements are row-major within the box.
struct Box {
  std::vector<int64_t> offsets, sizes;
  bool operator==(const Box&) const = default;
};

int64_t box_numel(const Box& b);
Box whole(const std::vector<int64_t>& shape);
std::string box_str(const Box& b);  // "[0:4, 8:16]"

// The boxes that make up the row-major flat elements [begin, end) of a tensor of `shape`, in
// order: each box is one contiguous run of the flattening, and together they are the range. (A
// flat shard of a buffer, ZeRO's or a data-parallel save's, cuts tensors this way: at most two
// partial boxes per dimension, and the full ones between.)
std::vector<Box> boxes_of_flat_range(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

// The row-major flat index, within the tensor of `shape`, of the box's first element.
int64_t flat_start(const std::vector<int64_t>& shape, const Box& b);

}  // namespace trainrun
