// splitmix64: the one hash behind sample positions and the synthetic source, so both are a pure
// function of (seed, index) on every platform.
#pragma once

#include <cstdint>

#include "trainrun/core/rng.h"

namespace trainrun {

// A sequential generator over the same mixer (Steele et al.'s SplitMix64).
struct SplitMix64 {
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    const uint64_t r = splitmix64(state);
    state += kGoldenGamma;
    return r;
  }
  uint64_t state;
};

}  // namespace trainrun
