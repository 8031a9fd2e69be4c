// Inverted dropout over the mask of trainrun/core/dropout_mask.h (shared with the CUDA kernels, so
// both devices drop the same elements). p == 0 is an exact copy.
#include <cstring>

#include "kernels.h"
#include "trainrun/core/dropout_mask.h"

namespace trainrun::cpu {

template <class T>
void dropout_forward(T* out, const T* in, int64_t n, float p, uint64_t seed) {
  if (p == 0.0f) {
    if (out != in) std::memmove(out, in, sizeof(T) * n);
    return;
  }
  const DropoutMask mask = DropoutMask::make(seed, p);
  const T s = static_cast<T>(dropout_scale(p));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = mask.keeps(i) ? in[i] * s : T(0);
}

template <class T>
void dropout_backward(T* din, const T* dout, int64_t n, float p, uint64_t seed) {
  const DropoutMask mask = DropoutMask::make(seed, p);
  const T s = static_cast<T>(dropout_scale(p));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    if (mask.keeps(i)) din[i] += dout[i] * s;
}

template void dropout_forward<float>(float*, const float*, int64_t, float, uint64_t);
template void dropout_forward<double>(double*, const double*, int64_t, float, uint64_t);
template void dropout_backward<float>(float*, const float*, int64_t, float, uint64_t);
template void dropout_backward<double>(double*, const double*, int64_t, float, uint64_t);

}  // namespace trainrun::cpu
