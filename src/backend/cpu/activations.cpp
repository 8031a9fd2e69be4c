// Pointwise activations: flat loops over contiguous memory, split across OpenMP threads.
// GELU is GPT-2's tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); its
// backward differentiates that same formula (not the exact erf GELU) so gradients check exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels.h"
#include "vec_math.h"

namespace trainrun::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <class T>
void gelu_forward(T* out, const T* in, int64_t n) {
  const T k = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kGeluCubic);
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    out[i] = static_cast<T>(0.5) * x * (1 + tanh_vec(k * (x + a * x * x * x)));
  }
}

template <class T>
void gelu_backward(T* din, const T* dout, const T* in, int64_t n) {
  const T k = static_cast<T>(kSqrt2OverPi), a = static_cast<T>(kGeluCubic);
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const T x = in[i];
    const T th = tanh_vec(k * (x + a * x * x * x));
    const T sech2 = 1 - th * th;
    const T grad =
        static_cast<T>(0.5) * (1 + th) + static_cast<T>(0.5) * x * sech2 * k * (1 + 3 * a * x * x);
    din[i] += grad * dout[i];
  }
}

template <class T>
void relu_forward(T* out, const T* in, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0 ? in[i] : T(0);
}

template <class T>
void relu_backward(T* din, const T* dout, const T* in, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) din[i] += in[i] > 0 ? dout[i] : T(0);
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);
template void relu_forward<float>(float*, const float*, int64_t);
template void relu_forward<double>(double*, const double*, int64_t);
template void relu_backward<float>(float*, const float*, const float*, int64_t);
template void relu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace trainrun::cpu
