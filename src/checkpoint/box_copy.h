// Internal to src/checkpoint: moving elements between boxes of one tensor (state_dict.h). A
// stored slice and a requested box overlap in a box; that overlap is copied run by run along the
// last dimension. Pure functions: thread safe.
#pragma once

#include <optional>

#include "trainrun/checkpoint/state_dict.h"

namespace trainrun {

// The overlap of two boxes of the same tensor; nullopt when they share no element.
std::optional<Box> intersect(const Box& a, const Box& b);

// Copies the elements in both boxes from `src` (src_box's elements, row-major) to `dst`.
void copy_overlap(const Box& src_box, const float* src, const Box& dst_box, float* dst);

// True when `inner` (inside `outer`) occupies one contiguous run of outer's row-major elements:
// every dimension after the first one where inner is more than one element wide is full.
bool contiguous_within(const Box& inner, const Box& outer);
// The row-major index within `outer` of inner's first element.
int64_t offset_within(const Box& inner, const Box& outer);

}  // namespace trainrun
