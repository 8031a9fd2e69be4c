// The dropout mask, a pure function of (seed, element index): no mask tensor is stored, the
// backward recomputes it, a resumed run draws the same masks, and the CPU reference and the CUDA
// kernels draw bit-identical masks from this one definition. splitmix64's finaliser twice:
//   key = mix64(seed);  u = mix64(key + (index + 1) * golden)
//   keep  iff  (u >> 40) >= floor(p * 2^24)          (a 24-bit uniform against a threshold)
// Mixing the seed first keeps streams for nearby seeds unrelated. Kept elements scale by
// 1 / (1 - p); p == 0 keeps everything.
#pragma once

#include <cstdint>

#include "trainrun/core/host_device.h"
#include "trainrun/core/rng.h"

namespace trainrun {

struct DropoutMask {
  uint64_t key;     // mix64(seed)
  uint32_t thresh;  // floor(p * 2^24)

  // The host computes key and threshold once per call; kernels receive the struct by value.
  static DropoutMask make(uint64_t seed, float p) {
    return {mix64(seed), static_cast<uint32_t>(double(p) * 16777216.0)};
  }
  TRAINRUN_HD bool keeps(uint64_t index) const {
    return static_cast<uint32_t>(mix64(key + (index + 1) * kGoldenGamma) >> 40) >= thresh;
  }
};

// The scale applied to kept elements, in double so both sides round it identically.
inline double dropout_scale(float p) {
  return 1.0 / (1.0 - double(p));
}

}  // namespace trainrun
