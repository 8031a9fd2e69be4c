// Pointwise activations, computed in fp32 whatever the storage type. GELU is GPT-2's tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its backward differentiates
// that same formula, term for term as the CPU reference (src/backend/cpu/activations.cpp) does.
// tanhf, not a fast intrinsic: the build has no --use_fast_math. Backwards accumulate (+=) or
// overwrite (store_grads). W elements a thread per access (pack.cuh).
#include "common.cuh"
#include "launch.h"
#include "pack.cuh"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;

// GELU's derivative at x (the CPU reference's formula).
__device__ __forceinline__ float gelu_grad(float x) {
  const float th = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

template <int W, class T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    Vec<T, W> r = load_vec<W>(in + i);
    for (int k = 0; k < W; ++k) {
      const float x = to_f32(r[k]);
      r[k] = from_f32<T>(0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x))));
    }
    store_vec<W>(out + i, r);
  });
}

// Overwriting never reads din, so din may be dout (in place): both packs are read first.
template <int W, class T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, int64_t n,
                                     bool accumulate) {
  for_each_pack<W>(n, [&](int64_t i) {
    const Vec<T, W> x = load_vec<W>(in + i), d = load_vec<W>(dout + i);
    float g[W];
    for (int k = 0; k < W; ++k) g[k] = gelu_grad(to_f32(x[k])) * to_f32(d[k]);
    store_grads<W>(din + i, g, accumulate);
  });
}

template <int W, class T>
__global__ void relu_forward_kernel(T* out, const T* in, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    Vec<T, W> r = load_vec<W>(in + i);
    for (int k = 0; k < W; ++k) r[k] = from_f32<T>(to_f32(r[k]) > 0.0f ? to_f32(r[k]) : 0.0f);
    store_vec<W>(out + i, r);
  });
}

template <int W, class T>
__global__ void relu_backward_kernel(T* din, const T* dout, const T* in, int64_t n,
                                     bool accumulate) {
  for_each_pack<W>(n, [&](int64_t i) {
    const Vec<T, W> x = load_vec<W>(in + i), d = load_vec<W>(dout + i);
    float g[W];
    for (int k = 0; k < W; ++k) g[k] = to_f32(x[k]) > 0.0f ? to_f32(d[k]) : 0.0f;
    store_grads<W>(din + i, g, accumulate);
  });
}

}  // namespace

void gelu_forward(DType dt, void* out, const void* in, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "gelu", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(n, packable<kPack<T>>(n, {out, in}), kThreads, [&](auto w, unsigned g) {
      TRAINRUN_LAUNCH(g, kThreads, 0, gelu_forward_kernel<decltype(w)::value, T>)
      (static_cast<T*>(out), static_cast<const T*>(in), n);
    });
  });
  check_launch("gelu_forward");
}

void gelu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate) {
  if (n <= 0) return;
  by_dtype(dt, "gelu_backward", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        n, packable<kPack<T>>(n, {din, dout, in}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, gelu_backward_kernel<decltype(w)::value, T>)
          (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n,
           accumulate);
        });
  });
  check_launch("gelu_backward");
}

void relu_forward(DType dt, void* out, const void* in, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "relu", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(n, packable<kPack<T>>(n, {out, in}), kThreads, [&](auto w, unsigned g) {
      TRAINRUN_LAUNCH(g, kThreads, 0, relu_forward_kernel<decltype(w)::value, T>)
      (static_cast<T*>(out), static_cast<const T*>(in), n);
    });
  });
  check_launch("relu_forward");
}

void relu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate) {
  if (n <= 0) return;
  by_dtype(dt, "relu_backward", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        n, packable<kPack<T>>(n, {din, dout, in}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, relu_backward_kernel<decltype(w)::value, T>)
          (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n,
           accumulate);
        });
  });
  check_launch("relu_backward");
}

}  // namespace trainrun::cuda
