#include <stdexcept>

#include "trainrun/comm.h"

namespace trainrun {

Shard shard_of(int64_t n, int world, int rank) {
  if (n < 0 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("shard_of: need n >= 0, world >= 1 and 0 <= rank < world");
  // r*n can exceed 2^63 only for n near 2^63 / world: not a size a buffer can have.
  return Shard{rank * n / world, (rank + 1) * n / world};
}

}  // namespace trainrun
