// The residual add that residual_layernorm and residual_rmsnorm fold into the first pass of their
// norm's forward kernel (layernorm.cu, rmsnorm.cu): one warp reads a row of x and y, writes
// sum = x + y and keeps its part of the statistics, instead of a separate add kernel writing the
// sum and the norm reading it back. The sum is rounded to the storage type before it is counted,
// exactly as add() stores it and the norm then reads it, so fused and unfused results are equal
// bit for bit.
#pragma once

#include "common.cuh"

namespace trainrun::cuda {

// This lane's share (columns lane, lane + 32, ...) of sum over row `off` of the row's values, or
// of their squares: the row is in[off..] when res is null, else sum[off..] = in + res, written
// here. Each lane writes only the elements it later rereads, so no barrier is needed.
template <class T>
__device__ __forceinline__ float residual_row_sum(T* sum, const T* in, const T* res, int64_t off,
                                                  int lane, int64_t C, bool squares = false) {
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    float v;
    if (res) {
      const T t = add_rounded(in[off + c], res[off + c]);
      sum[off + c] = t;
      v = to_f32(t);
    } else {
      v = to_f32(in[off + c]);
    }
    s += squares ? v * v : v;
  }
  return s;
}

}  // namespace trainrun::cuda
