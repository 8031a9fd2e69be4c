// The chunk plan of the deterministic two-pass column reductions (colsum_accumulate's dbias,
// layernorm's dw/db, rmsnorm's dw): pass 1 splits the rows into at most kChunks fixed chunks of
// at least kMinChunkRows rows, each block (kTileCols x kTileRows threads) summing one (chunk,
// 32-column tile) in a fixed in-block order; pass 2 adds the chunk partials per column in chunk
// order. One plan for the three, so they cannot drift, and the scratch they need is sized once.
#pragma once

#include <cstdint>

namespace trainrun::cuda {

constexpr int kChunks = 128;  // most row chunks of pass 1
constexpr int kMinChunkRows = 64;
constexpr int kTileCols = 32, kTileRows = 8;

// The number of row chunks pass 1 splits `rows` into.
inline int64_t column_chunks(int64_t rows) {
  const int64_t c = (rows + kMinChunkRows - 1) / kMinChunkRows;
  return c < 1 ? 1 : (c > kChunks ? kChunks : c);
}

}  // namespace trainrun::cuda
