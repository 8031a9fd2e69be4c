// Shared device helpers for the CUDA kernels: fp32 <-> storage-type conversion (every kernel
// computes in fp32 whatever it stores), warp reductions, and the launch-error check. Kept tiny
// so each kernel file reads on its own.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "trainrun/errors.h"
#include "trainrun/tensor.h"

namespace trainrun::cuda {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(bf16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Grid size for a grid-stride loop over n elements with `threads` per block: enough blocks to
// fill an H100/H200 several times over, capped so the grid stays within limits at any n.
inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 32768) blocks = 32768;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// Throws trainrun::DeviceError naming the kernel when the launch failed (bad configuration,
// no kernel image for this GPU, a sticky error from an earlier kernel).
void check_launch(const char* kernel);

// Calls f(T{}) with T = float or bf16 for the activation dtype; anything else is refused.
template <class F>
void by_dtype(DType dt, const char* op, F&& f) {
  if (dt == DType::f32)
    f(float{});
  else if (dt == DType::bf16)
    f(bf16{});
  else
    throw DeviceError(std::string(op) + ": the CUDA backend supports f32 and bf16, not " +
                      dtype_name(dt) + " (f64 runs on the CPU backend only)");
}

// As by_dtype, plus S = float or T for the saved statistics (mean/rstd, lse, losses).
template <class F>
void by_dtypes(DType dt, DType st, const char* op, F&& f) {
  by_dtype(dt, op, [&](auto t) {
    using T = decltype(t);
    if (st == DType::f32)
      f(t, float{});
    else if (st == dt)
      f(t, T{});
    else
      throw DeviceError(std::string(op) + ": statistics must be f32 or " + dtype_name(dt) +
                        ", got " + dtype_name(st));
  });
}

}  // namespace trainrun::cuda
