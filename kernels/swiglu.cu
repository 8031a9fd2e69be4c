// SwiGLU gate of the Llama MLP, fp32 arithmetic whatever the storage type; the CPU reference is
// src/backend/cpu/swiglu.cpp. in [N,2H] = (gate | up), out [N,H] = silu(gate) * up,
// silu(g) = g * sigmoid(g). Backward, sg = sigmoid(g), added (or stored, overwriting):
//   dgate += dout * up * sg * (1 + g * (1 - sg)),  dup += dout * silu(g).
// sigmoid as 1 / (1 + expf(-g)): expf overflows to inf for very negative g and sg becomes 0, the
// right limit. expf, not __expf: the build has no --use_fast_math. Grid-stride over the output,
// W elements a thread per access (pack.cuh): 16 bytes where H and the pointers allow it, so a
// pack never straddles the gate and up halves of a row.
#include "common.cuh"
#include "launch.h"
#include "pack.cuh"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

template <int W, class T>
__global__ void swiglu_forward_kernel(T* out, const T* in, int64_t N, int64_t H) {
  for_each_pack<W>(N * H, [&](int64_t idx) {
    const int64_t gi = idx / H * 2 * H + idx % H;
    const Vec<T, W> g = load_vec<W>(in + gi), u = load_vec<W>(in + gi + H);
    Vec<T, W> r;
    for (int k = 0; k < W; ++k) {
      const float gk = to_f32(g[k]);
      r[k] = from_f32<T>(gk / (1.0f + expf(-gk)) * to_f32(u[k]));
    }
    store_vec<W>(out + idx, r);
  });
}

template <int W, class T>
__global__ void swiglu_backward_kernel(T* din, const T* dout, const T* in, int64_t N, int64_t H,
                                       bool accumulate) {
  for_each_pack<W>(N * H, [&](int64_t idx) {
    const int64_t gi = idx / H * 2 * H + idx % H, ui = gi + H;
    const Vec<T, W> g = load_vec<W>(in + gi), u = load_vec<W>(in + ui), d = load_vec<W>(dout + idx);
    float dg[W], du[W];
    for (int k = 0; k < W; ++k) {
      const float gk = to_f32(g[k]), dk = to_f32(d[k]);
      const float sg = 1.0f / (1.0f + expf(-gk));
      dg[k] = dk * to_f32(u[k]) * sg * (1.0f + gk * (1.0f - sg));
      du[k] = dk * gk * sg;
    }
    store_grads<W>(din + gi, dg, accumulate);
    store_grads<W>(din + ui, du, accumulate);
  });
}

}  // namespace

void swiglu_forward(DType dt, void* out, const void* in, int64_t N, int64_t H) {
  if (N <= 0 || H <= 0) return;
  by_dtype(dt, "swiglu", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        N * H, packable<kPack<T>>(H, {out, in}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, swiglu_forward_kernel<decltype(w)::value, T>)
          (static_cast<T*>(out), static_cast<const T*>(in), N, H);
        });
  });
  check_launch("swiglu_forward");
}

void swiglu_backward(DType dt, void* din, const void* dout, const void* in, int64_t N, int64_t H,
                     bool accumulate) {
  if (N <= 0 || H <= 0) return;
  by_dtype(dt, "swiglu_backward", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        N * H, packable<kPack<T>>(H, {din, dout, in}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, swiglu_backward_kernel<decltype(w)::value, T>)
          (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), N, H,
           accumulate);
        });
  });
  check_launch("swiglu_backward");
}

}  // namespace trainrun::cuda
