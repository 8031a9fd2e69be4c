// Fused AdamW, one pass over the flat parameter buffer (or the rank's ZeRO-1 slice of it): the
// element update of trainrun/core/adamw_update.h, shared with the CUDA kernel.
#include "kernels.h"
#include "trainrun/core/adamw_update.h"

namespace trainrun::cpu {

template <class T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWStep<T>& s) {
  const AdamWStep<T> k = s;  // a local copy: the loop's constants stay in registers
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) k.update(param[i], grad[i], m[i], v[i]);
}

template void adamw<float>(float*, const float*, float*, float*, int64_t, const AdamWStep<float>&);
template void adamw<double>(double*, const double*, double*, double*, int64_t,
                            const AdamWStep<double>&);

}  // namespace trainrun::cpu
