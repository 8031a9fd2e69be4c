// Deterministic column reductions on the CPU (matmul's dbias, layernorm's dw and db, rmsnorm's
// dw): threads own blocks of kColumnBlock columns and walk every row in order, so each column's
// sum is added in one order whatever the thread count, race-free, and every read is a
// contiguous run of a row. The CUDA twin is kernels/column_chunks.cuh.
#pragma once

#include <cstdint>

namespace trainrun::cpu {

inline constexpr int64_t kColumnBlock = 64;

// For each of the N sums k: dst[k][c] = (acc ? dst[k][c] : 0) + the sum over rows r of row r's
// term, where row(r, c0, c1, s) adds row r's terms of columns [c0, c1) into s[k][c - c0].
template <int N, class T, class Row>
void column_sums(T* const (&dst)[N], bool acc, int64_t rows, int64_t cols, const Row& row) {
  const int64_t nblocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock;
    const int64_t c1 = c0 + kColumnBlock < cols ? c0 + kColumnBlock : cols;
    T s[N][kColumnBlock] = {};
    for (int64_t r = 0; r < rows; ++r) row(r, c0, c1, s);
    for (int k = 0; k < N; ++k)
      for (int64_t c = c0; c < c1; ++c) dst[k][c] = acc ? dst[k][c] + s[k][c - c0] : s[k][c - c0];
  }
}

}  // namespace trainrun::cpu
