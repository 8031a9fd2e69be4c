// Fused AdamW with decoupled weight decay (Loshchilov & Hutter), one pass over the flat
// parameter buffer (or the rank's ZeRO-1 slice of it):
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
//   p -= lr * ( mhat / (sqrt(vhat) + eps) + wd * p ),  mhat = m/(1-b1^t), vhat = v/(1-b2^t)
// The bias corrections depend only on the step, so they are computed once in double. g is the
// gradient times grad_scale (gradient clipping), rounded to T as a separate scale() would.
#include <cmath>

#include "kernels.h"

namespace trainrun::cpu {

template <class T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weight_decay, int64_t step, double grad_scale) {
  const double t = static_cast<double>(step);
  const T inv_bc1 = static_cast<T>(1.0 / (1.0 - std::pow(beta1, t)));
  const T inv_bc2 = static_cast<T>(1.0 / (1.0 - std::pow(beta2, t)));
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T lr_ = static_cast<T>(lr), eps_ = static_cast<T>(eps), wd = static_cast<T>(weight_decay);
  const T gs = static_cast<T>(grad_scale);
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + (1 - b1) * g;
    const T vi = b2 * v[i] + (1 - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const T mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    param[i] -= lr_ * (mhat / (std::sqrt(vhat) + eps_) + wd * param[i]);
  }
}

template void adamw<float>(float*, const float*, float*, float*, int64_t, double, double, double,
                           double, double, int64_t, double);
template void adamw<double>(double*, const double*, double*, double*, int64_t, double, double,
                            double, double, double, int64_t, double);

}  // namespace trainrun::cpu
