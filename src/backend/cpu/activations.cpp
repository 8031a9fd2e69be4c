// Pointwise activations: flat loops over contiguous memory, split across OpenMP threads.
// GELU is GPT-2's tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); its
// backward differentiates that same formula (not the exact erf GELU) so gradients check exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels.h"
#include "simd_clones.h"
#include "vec_math.h"

namespace trainrun::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

namespace {
// Always inlined: a call per element would keep the span loops from vectorising.
template <class T>
[[gnu::always_inline]] inline T gelu(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kGeluCubic);
  return static_cast<T>(0.5) * x * (1 + tanh_vec(k * (x + a * x * x * x)));
}

// d gelu(x) / dx
template <class T>
[[gnu::always_inline]] inline T gelu_grad(T x) {
  const T k = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kGeluCubic);
  const T th = tanh_vec(k * (x + a * x * x * x));
  const T sech2 = 1 - th * th;
  return static_cast<T>(0.5) * (1 + th) + static_cast<T>(0.5) * x * sech2 * k * (1 + 3 * a * x * x);
}

// One thread's span of the f32 loops, AVX-512 where the CPU has it (simd_clones.h).
TRAINRUN_AVX512_CLONES void gelu_forward_span(float* out, const float* in, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(in[i]);
}

// din = g (acc false: din is never loaded) or din += g.
TRAINRUN_AVX512_CLONES void gelu_backward_span(float* din, const float* dout, const float* in,
                                               int64_t n, bool acc) {
  if (acc) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) din[i] += gelu_grad(in[i]) * dout[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) din[i] = gelu_grad(in[i]) * dout[i];
  }
}

// din = g (kAcc false) or din += g: two loops, so the overwriting one never loads din.
template <bool kAcc, class T>
void relu_backward_loop(T* din, const T* dout, const T* in, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const T g = in[i] > 0 ? dout[i] : T(0);
    if constexpr (kAcc)
      din[i] += g;
    else
      din[i] = g;
  }
}
}  // namespace

template <class T>
void gelu_forward(T* out, const T* in, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_each_thread_span(n,
                         [&](int64_t b, int64_t e) { gelu_forward_span(out + b, in + b, e - b); });
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) out[i] = gelu(in[i]);
  }
}

template <class T>
void gelu_backward(T* din, const T* dout, const T* in, int64_t n, bool acc) {
  if constexpr (std::is_same_v<T, float>) {
    for_each_thread_span(n, [&](int64_t b, int64_t e) {
      gelu_backward_span(din + b, dout + b, in + b, e - b, acc);
    });
  } else {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) din[i] = (acc ? din[i] : T(0)) + gelu_grad(in[i]) * dout[i];
  }
}

template <class T>
void relu_forward(T* out, const T* in, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0 ? in[i] : T(0);
}

template <class T>
void relu_backward(T* din, const T* dout, const T* in, int64_t n, bool acc) {
  if (acc)
    relu_backward_loop<true>(din, dout, in, n);
  else
    relu_backward_loop<false>(din, dout, in, n);
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t, bool);
template void gelu_backward<double>(double*, const double*, const double*, int64_t, bool);
template void relu_forward<float>(float*, const float*, int64_t);
template void relu_forward<double>(double*, const double*, int64_t);
template void relu_backward<float>(float*, const float*, const float*, int64_t, bool);
template void relu_backward<double>(double*, const double*, const double*, int64_t, bool);

}  // namespace trainrun::cpu
