// Whole-tensor reductions returned to the host in double: the loss sum and the gradient norm.
// Accumulating in double keeps the result independent of size for f32 tensors of ~1e8
// elements; NaN and Inf propagate (no filtering) so the trainer can detect a bad step.
#include "kernels.h"

namespace trainrun::cpu {

template <class T>
double sum(const T* x, int64_t n) {
  double acc = 0;
#pragma omp parallel for simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
  return acc;
}

template <class T>
double sum_squares(const T* x, int64_t n) {
  double acc = 0;
#pragma omp parallel for simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return acc;
}

template double sum<float>(const float*, int64_t);
template double sum<double>(const double*, int64_t);
template double sum_squares<float>(const float*, int64_t);
template double sum_squares<double>(const double*, int64_t);

}  // namespace trainrun::cpu
