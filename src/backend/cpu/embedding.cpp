// Token/position embedding lookup. Forward copies one table row per output row, rows in
// parallel. Backward scatters dout rows into dtable rows; repeated ids would race if rows ran in
// parallel, so threads own column blocks of dtable instead and walk all N rows in order: no
// atomics, and the sum order per element is fixed (deterministic at any thread count).
#include <algorithm>
#include <cstring>

#include "kernels.h"
#include "trainrun/core/no_id.h"

namespace trainrun::cpu {

template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    if (ids[n] == kNoId)  // another vocabulary-parallel rank's row
      std::fill(out + n * C, out + (n + 1) * C, T(0));
    else
      std::memcpy(out + n * C, table + static_cast<int64_t>(ids[n]) * C, sizeof(T) * C);
  }
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C) {
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int64_t n = 0; n < N; ++n) {
      if (ids[n] == kNoId) continue;
      T* d = dtable + static_cast<int64_t>(ids[n]) * C;
      const T* g = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t);

}  // namespace trainrun::cpu
