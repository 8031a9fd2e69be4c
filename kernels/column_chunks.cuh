// The deterministic two-pass column reductions (colsum_accumulate's dbias, layernorm's dw and db,
// rmsnorm's dw), written once: pass 1 splits the rows into at most kChunks fixed chunks of at
// least kMinChunkRows rows, each block (kTileCols x kTileRows threads) summing one (chunk,
// 32-column tile) in a fixed in-block order; pass 2 adds the chunk partials per column in chunk
// order. The order of every addition is fixed by the shape alone, so the result does not depend
// on scheduling. The CPU twin is src/backend/cpu/column_sums.h.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace trainrun::cuda {

constexpr int kChunks = 128;  // most row chunks of pass 1
constexpr int kMinChunkRows = 64;
constexpr int kTileCols = 32, kTileRows = 8;

// The number of row chunks pass 1 splits `rows` into.
inline int64_t column_chunks(int64_t rows) {
  const int64_t c = (rows + kMinChunkRows - 1) / kMinChunkRows;
  return c < 1 ? 1 : (c > kChunks ? kChunks : c);
}

// How pass 1 covers `rows` x `cols`: its launch shape, and the rows each chunk sums.
struct ColumnPlan {
  int64_t chunks, rows_per_chunk;
  dim3 grid, block;
};
inline ColumnPlan column_plan(int64_t rows, int64_t cols) {
  const int64_t chunks = column_chunks(rows);
  return {chunks, (rows + chunks - 1) / chunks,
          dim3(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols),
               static_cast<unsigned>(chunks)),
          dim3(kTileCols, kTileRows)};
}
// The fp32 scratch the partials of `sums` column sums take.
inline size_t column_scratch_bytes(int sums, int64_t rows, int64_t cols) {
  return static_cast<size_t>(sums * column_chunks(rows) * cols) * sizeof(float);
}

// Pass 1 of N column sums, called by a kernel launched with grid (ceil(cols / kTileCols),
// column_chunks(rows)) and block (kTileCols, kTileRows). Thread (x, y) adds term(r, c, s) (which
// adds row r's terms of column c into s[0..N)) over rows y, y + kTileRows, ... of its chunk; the
// kTileRows partial rows are then added in y order into partial[(k * chunks + chunk) * cols + c].
template <int N, class Term>
__device__ __forceinline__ void column_partials(float* partial, int64_t rows, int64_t cols,
                                                int64_t rows_per_chunk, const Term& term) {
  __shared__ float acc[N][kTileRows][kTileCols];
  const int64_t c = blockIdx.x * int64_t(kTileCols) + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float s[N];
  for (int k = 0; k < N; ++k) s[k] = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) term(r, c, s);
  for (int k = 0; k < N; ++k) acc[k][threadIdx.y][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    const int64_t chunks = gridDim.y;
    for (int k = 0; k < N; ++k) {
      float t = 0.0f;
      for (int y = 0; y < kTileRows; ++y) t += acc[k][y][threadIdx.x];
      partial[(k * chunks + blockIdx.y) * cols + c] = t;
    }
  }
}

// Where pass 2 puts the N sums: dst[k][c] += sum k of column c, or = (a parameter gradient's
// first write of a step, GradWrite::overwrite: dst never read).
template <int N, class G>
struct ColumnSums {
  G* dst[N];
  bool accumulate;
};

// Pass 2: one thread per column adds the chunk partials of each sum in chunk order.
template <int N, class G>
__global__ void column_finish_kernel(ColumnSums<N, G> out, const float* partial, int64_t chunks,
                                     int64_t cols) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  for (int k = 0; k < N; ++k) {
    float t = 0.0f;
    for (int64_t j = 0; j < chunks; ++j) t += partial[(k * chunks + j) * cols + c];
    store_grad(out.dst[k] + c, t, out.accumulate);
  }
}

// Launches pass 2 for `out` (after a pass 1 over `chunks` chunks of `cols` columns).
template <int N, class G>
void finish_columns(ColumnSums<N, G> out, const float* partial, int64_t chunks, int64_t cols) {
  TRAINRUN_LAUNCH(static_cast<unsigned>((cols + 255) / 256), 256, 0, column_finish_kernel<N, G>)
  (out, partial, chunks, cols);
}

}  // namespace trainrun::cuda
