// SwiGLU gate of the Llama MLP: in [N,2H] = (gate | up), out [N,H] = silu(gate) * up with
// silu(g) = g * sigmoid(g). Backward, with sg = sigmoid(g):
//   dgate += dout * up * sg * (1 + g * (1 - sg)),   dup += dout * silu(g).
// sigmoid as 1 / (1 + e^-g): e^-g overflows to inf for very negative g and sg becomes 0, the
// right limit, so no branch is needed. Rows are independent: parallel over N.
#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace trainrun::cpu {

template <class T>
void swiglu_forward(T* out, const T* in, int64_t N, int64_t H) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = in + n * 2 * H;
    const T* up = gate + H;
    T* o = out + n * H;
    for (int64_t i = 0; i < H; ++i) {
      const T g = gate[i];
      o[i] = g / (1 + std::exp(-g)) * up[i];
    }
  }
}

template <class T>
void swiglu_backward(T* din, const T* dout, const T* in, int64_t N, int64_t H, bool acc) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* gate = in + n * 2 * H;
    const T* up = gate + H;
    const T* d = dout + n * H;
    T* dgate = din + n * 2 * H;
    T* dup = dgate + H;
    if (!acc) std::fill(dgate, dup + H, T(0));  // a row at a time, while it is in cache
    for (int64_t i = 0; i < H; ++i) {
      const T g = gate[i];
      const T sg = 1 / (1 + std::exp(-g));
      dgate[i] += d[i] * up[i] * sg * (1 + g * (1 - sg));
      dup[i] += d[i] * g * sg;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int64_t, int64_t);
template void swiglu_forward<double>(double*, const double*, int64_t, int64_t);
template void swiglu_backward<float>(float*, const float*, const float*, int64_t, int64_t, bool);
template void swiglu_backward<double>(double*, const double*, const double*, int64_t, int64_t,
                                      bool);

}  // namespace trainrun::cpu
