// Pointwise activations, computed in fp32 whatever the storage type. GELU is GPT-2's tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its backward differentiates
// that same formula, term for term as the CPU reference (src/backend/cpu/activations.cpp) does.
// tanhf, not a fast intrinsic: the build has no --use_fast_math. Backwards accumulate (+=) or
// overwrite (store_grad).
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;

template <class T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(in[i]);
    out[i] = from_f32<T>(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x))));
  }
}

template <class T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, int64_t n,
                                     bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(in[i]);
    const float th = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    // Overwriting never reads din, so din may be dout (in place).
    store_grad(din + i, grad * to_f32(dout[i]), accumulate);
  }
}

template <class T>
__global__ void relu_forward_kernel(T* out, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(in[i]);
    out[i] = from_f32<T>(x > 0.0f ? x : 0.0f);
  }
}

template <class T>
__global__ void relu_backward_kernel(T* din, const T* dout, const T* in, int64_t n,
                                     bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_grad(din + i, to_f32(in[i]) > 0.0f ? to_f32(dout[i]) : 0.0f, accumulate);
}

}  // namespace

void gelu_forward(DType dt, void* out, const void* in, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "gelu", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, gelu_forward_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(in), n);
  });
  check_launch("gelu_forward");
}

void gelu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate) {
  if (n <= 0) return;
  by_dtype(dt, "gelu_backward", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, gelu_backward_kernel<T>)
    (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n, accumulate);
  });
  check_launch("gelu_backward");
}

void relu_forward(DType dt, void* out, const void* in, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "relu", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, relu_forward_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(in), n);
  });
  check_launch("relu_forward");
}

void relu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate) {
  if (n <= 0) return;
  by_dtype(dt, "relu_backward", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, relu_backward_kernel<T>)
    (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n, accumulate);
  });
  check_launch("relu_backward");
}

}  // namespace trainrun::cuda
