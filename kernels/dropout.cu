// Inverted dropout over the mask of trainrun/core/dropout_mask.h, the same header the CPU reference
// (src/backend/cpu/dropout.cpp) uses, so both devices drop bit-identical elements: a run can move
// between devices and a resume redraws the same masks; the backward recomputes the mask instead
// of storing it. The key, threshold and 1/(1-p) are computed on the host exactly as the CPU does.
// p == 0 keeps everything with scale 1 (an exact copy).
#include "common.cuh"
#include "launch.h"
#include "trainrun/core/dropout_mask.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void dropout_forward_kernel(T* out, const T* in, int64_t n, DropoutMask mask, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] =
        mask.keeps(static_cast<uint64_t>(i)) ? from_f32<T>(to_f32(in[i]) * s) : from_f32<T>(0.0f);
}

template <class T>
__global__ void dropout_backward_kernel(T* din, const T* dout, int64_t n, DropoutMask mask,
                                        float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    if (mask.keeps(static_cast<uint64_t>(i)))
      din[i] = from_f32<T>(to_f32(din[i]) + to_f32(dout[i]) * s);
}

}  // namespace

void dropout_forward(DType dt, void* out, const void* in, int64_t n, float p, uint64_t seed) {
  if (n <= 0) return;
  const float s = static_cast<float>(dropout_scale(p));
  by_dtype(dt, "dropout", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, dropout_forward_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(in), n, DropoutMask::make(seed, p), s);
  });
  check_launch("dropout_forward");
}

void dropout_backward(DType dt, void* din, const void* dout, int64_t n, float p, uint64_t seed) {
  if (n <= 0) return;
  const float s = static_cast<float>(dropout_scale(p));
  by_dtype(dt, "dropout_backward", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, dropout_backward_kernel<T>)
    (static_cast<T*>(din), static_cast<const T*>(dout), n, DropoutMask::make(seed, p), s);
  });
  check_launch("dropout_backward");
}

}  // namespace trainrun::cuda
