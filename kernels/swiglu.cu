// SwiGLU gate of the Llama MLP, fp32 arithmetic whatever the storage type; the CPU reference is
// src/backend/cpu/swiglu.cpp. in [N,2H] = (gate | up), out [N,H] = silu(gate) * up,
// silu(g) = g * sigmoid(g). Backward, sg = sigmoid(g), added (or stored, overwriting):
//   dgate += dout * up * sg * (1 + g * (1 - sg)),  dup += dout * silu(g).
// sigmoid as 1 / (1 + expf(-g)): expf overflows to inf for very negative g and sg becomes 0, the
// right limit. expf, not __expf: the build has no --use_fast_math. One thread per output element,
// grid-stride.
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* in, int64_t N, int64_t H) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < N * H;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / H, i = idx % H;
    const float g = to_f32(in[n * 2 * H + i]), u = to_f32(in[n * 2 * H + H + i]);
    out[idx] = from_f32<T>(g / (1.0f + expf(-g)) * u);
  }
}

template <class T>
__global__ void swiglu_backward_kernel(T* din, const T* dout, const T* in, int64_t N, int64_t H,
                                       bool accumulate) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < N * H;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = idx / H, i = idx % H;
    const int64_t gi = n * 2 * H + i, ui = gi + H;
    const float g = to_f32(in[gi]), u = to_f32(in[ui]), d = to_f32(dout[idx]);
    const float sg = 1.0f / (1.0f + expf(-g));
    store_grad(din + gi, d * u * sg * (1.0f + g * (1.0f - sg)), accumulate);
    store_grad(din + ui, d * g * sg, accumulate);
  }
}

}  // namespace

void swiglu_forward(DType dt, void* out, const void* in, int64_t N, int64_t H) {
  if (N <= 0 || H <= 0) return;
  by_dtype(dt, "swiglu", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(N * H, kThreads), kThreads, 0, swiglu_forward_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(in), N, H);
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(DType dt, void* din, const void* dout, const void* in, int64_t N, int64_t H,
                     bool accumulate) {
  if (N <= 0 || H <= 0) return;
  by_dtype(dt, "swiglu_backward", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(N * H, kThreads), kThreads, 0, swiglu_backward_kernel<T>)
    (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), N, H,
     accumulate);
  });
  check_launch("swiglu_backward");
}

}  // namespace trainrun::cuda
