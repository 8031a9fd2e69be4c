// Internal to src/checkpoint: finding non-finite floats (NaN, +-inf) in a buffer. A checkpoint
// holding one would restore a diverged run, so writers refuse such a snapshot and readers refuse
// such a file. Pure functions: thread safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace trainrun {

struct NonFinite {
  size_t count = 0;  // non-finite values in the buffer
  size_t first = 0;  // index of the first one
  float value = 0;   // and that value
};

// One pass over `n` floats, at memory speed (a branch-free integer test that vectorises).
std::optional<NonFinite> find_non_finite(const float* data, size_t n);

// "model/wte holds 3 non-finite values of 1024 (the first, element 5, is inf)": `where` names
// the tensor and `n` is its size; elements are counted from the tensor's start.
std::string non_finite_message(const std::string& where, const NonFinite& nf, size_t n);

}  // namespace trainrun
