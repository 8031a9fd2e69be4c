// The shard split: shard r of n elements over w ranks is [r*n/w, (r+1)*n/w). Sizes differ by at
// most one, and it works when w does not divide n. ZeRO-1's optimizer shards, the MPI and NCCL
// reduce-scatter/all-gather ranges and the checkpoint's shard layout all use this one formula.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "trainrun/core/host_device.h"

namespace trainrun {

struct Shard {
  int64_t begin, end;
  TRAINRUN_HD constexpr int64_t size() const { return end - begin; }
};

// Unchecked, for device code and callers whose arguments are valid by construction. r*n can
// exceed 2^63 only for n near 2^63 / w: not a size a buffer can have.
TRAINRUN_HD constexpr Shard shard_split(int64_t n, int world, int rank) {
  return Shard{rank * n / world, (rank + 1) * n / world};
}

// Checked: throws std::invalid_argument unless n >= 0, world >= 1 and 0 <= rank < world.
inline Shard shard_of(int64_t n, int world, int rank) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("shard_of: need n >= 0, world >= 1 and 0 <= rank < world");
  return shard_split(n, world, rank);
}

}  // namespace trainrun
