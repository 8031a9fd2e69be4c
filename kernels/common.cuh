// Shared device helpers for the CUDA kernels: the launch helper, fp32 <-> storage-type conversion
// (every kernel computes in fp32 whatever it stores), warp reductions, and the launch-error check.
// Kept tiny so each kernel file reads on its own.
//
// Two compilers build these kernels: nvcc for the GPU (libtrainrun_cuda.so), and the host C++
// compiler for the CPU-executed device (libtrainrun_cudasim.so), which puts kernels/sim/include
// first on the include path so <cuda_runtime.h> and <cuda_bf16.h> are its stand-ins. Kernels
// launch through TRAINRUN_LAUNCH and take dynamic shared memory through TRAINRUN_DYNAMIC_SHARED,
// the only two constructs whose CUDA syntax a C++ compiler cannot read.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "trainrun/core/errors.h"
#include "trainrun/core/tensor.h"

// TRAINRUN_LAUNCH(grid, block, dynamic shared bytes, kernel)(arguments...): kernel<<<...>>>.
// The kernel comes last because its template arguments may hold commas.
#if defined(__CUDACC__)
#define TRAINRUN_LAUNCH(grid, block, smem, ...) __VA_ARGS__<<<(grid), (block), (smem)>>>
#define TRAINRUN_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#elif !defined(TRAINRUN_LAUNCH)
#error "kernels/ compiles under nvcc or against the sim's headers (kernels/sim/include)"
#endif

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

// a + b computed in f32 and rounded once to the storage type: add()'s element, and the residual
// add that the norms fold in (residual_row.cuh).
template <class T>
__device__ __forceinline__ T add_rounded(T a, T b) {
  return from_f32<T>(to_f32(a) + to_f32(b));
}

// A gradient's store (backend.h's GradWrite): *dst + g when accumulating, else g with *dst never
// read, so it may hold NaN, or be an input the thread has already read (in place).
template <class T>
__device__ __forceinline__ void store_grad(T* dst, float g, bool accumulate) {
  *dst = from_f32<T>(accumulate ? to_f32(*dst) + g : g);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ int warp_min(int v) {
  for (int o = 16; o > 0; o >>= 1) {
    const int w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w < v ? w : v;
  }
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

// Kernels that need more than the default 48 KB of dynamic shared memory must opt in.
template <class K>
void allow_smem(K kernel, size_t bytes, const char* name) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes));
  if (e != cudaSuccess)
    throw DeviceError(std::string("cudaFuncSetAttribute(") + name +
                      ", shared memory): " + cudaGetErrorString(e));
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

// Calls f(G{}) for the parameter-gradient dtype gt beside activations of dtype dt: G = the
// activation type, or float when dt is bf16 and gt is f32 (f32 gradients beside bf16
// activations: docs/cuda.md, "bf16 mixed precision").
template <class T, class F>
void by_grad_dtype(DType dt, DType gt, const char* op, F&& f) {
  if (gt == dt)
    f(T{});
  else if (gt == DType::f32 && dt == DType::bf16)
    f(float{});
  else
    throw DeviceError(std::string(op) + ": parameter gradients must be " + dtype_name(dt) +
                      " or f32 beside bf16, got " + dtype_name(gt));
}

// A token id outside its table at position n (launch.h, kNoBadId): packed so that atomicMin
// keeps the first bad position, with its id.
__device__ __forceinline__ void flag_bad_id(unsigned long long* flag, int64_t n, int64_t id) {
  atomicMin(flag, (static_cast<unsigned long long>(n) << 32) |
                      static_cast<unsigned long long>(static_cast<uint32_t>(id)));
}

}  // namespace trainrun::cuda
