// The residual add that residual_layernorm and residual_rmsnorm fold into the first pass of their
// norm's forward kernel (layernorm.cu, rmsnorm.cu): one warp reads a row of x and y, writes
// sum = x + y and keeps its part of the statistics, instead of a separate add kernel writing the
// sum and the norm reading it back. The sum is rounded to the storage type before it is counted,
// exactly as add() stores it and the norm then reads it, so fused and unfused results are equal
// bit for bit.
#pragma once

#include "common.cuh"
#include "pack.cuh"

namespace trainrun::cuda {

// This lane's share (its packs of W columns: for_lane_packs) of the sum over row `off` of the
// row's values, or of their squares: the row is in[off..] when res is null, else
// sum[off..] = in + res, written here. Each lane writes only the elements it later rereads (with
// the same W), so no barrier is needed.
template <int W, class T>
__device__ __forceinline__ float residual_row_sum(T* sum, const T* in, const T* res, int64_t off,
                                                  int lane, int64_t C, bool squares = false) {
  float s = 0.0f;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    Vec<T, W> t = load_vec<W>(in + off + c);
    if (res) {
      const Vec<T, W> y = load_vec<W>(res + off + c);
      for (int k = 0; k < W; ++k) t[k] = add_rounded(t[k], y[k]);
      store_vec<W>(sum + off + c, t);
    }
    for (int k = 0; k < W; ++k) {
      const float v = to_f32(t[k]);
      s += squares ? v * v : v;
    }
  });
  return s;
}

}  // namespace trainrun::cuda
