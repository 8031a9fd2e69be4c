// The sim's shared-memory race checker (compute-sanitizer's racecheck), private to kernels/sim/.
// Built into the plain sim plugin; the AddressSanitizer build (which cannot also carry the
// instrumentation it needs) gets the empty versions below.
#pragma once

#include <cstddef>
#include <string>

namespace trainrun::sim::race {

#if defined(TRAINRUN_SIM_RACECHECK)
// A block starts: every access to its shared memory (this thread's TLS block of the module, where
// the static __shared__ arrays live, and the `dynamic` bytes at `dyn`, which the scheduler has
// filled with 0xFF) is checked from now on against the others since the last barrier.
void block_begin(void* dyn, size_t dynamic);
void barrier();  // all threads of the block passed __syncthreads: a new interval
// The block is done: the first hazard it found (empty when none), as a report.
std::string block_end();
#else
inline void block_begin(void*, size_t) {}
inline void barrier() {}
inline std::string block_end() {
  return {};
}
#endif

}  // namespace trainrun::sim::race
