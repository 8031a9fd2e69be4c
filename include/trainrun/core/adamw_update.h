// The AdamW element update with decoupled weight decay (Loshchilov & Hutter), one definition for
// the CPU reference (src/backend/cpu/adamw.cpp) and the CUDA kernel (kernels/adamw.cu), so the
// two cannot drift (the same arithmetic in the same order, in T):
//   g = grad * grad_scale                    (gradient clipping's factor, folded in)
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
//   p -= lr * ( mhat / (sqrt(vhat) + eps) + wd * p ),  mhat = m/(1-b1^t), vhat = v/(1-b2^t)
// The bias corrections depend only on the step: the host computes them once, in double, and
// kernels receive the struct by value.
#pragma once

#include <cmath>
#include <cstdint>

#include "trainrun/core/host_device.h"

namespace trainrun {

TRAINRUN_HD inline float adamw_sqrt(float x) {
  return sqrtf(x);
}
TRAINRUN_HD inline double adamw_sqrt(double x) {
  return sqrt(x);
}

template <class T>
struct AdamWStep {
  T lr, b1, b2, eps, wd, inv_bc1, inv_bc2, grad_scale;

  static AdamWStep make(double lr, double beta1, double beta2, double eps, double weight_decay,
                        int64_t step, double grad_scale) {
    const double t = static_cast<double>(step);
    return {static_cast<T>(lr),
            static_cast<T>(beta1),
            static_cast<T>(beta2),
            static_cast<T>(eps),
            static_cast<T>(weight_decay),
            static_cast<T>(1.0 / (1.0 - std::pow(beta1, t))),
            static_cast<T>(1.0 / (1.0 - std::pow(beta2, t))),
            static_cast<T>(grad_scale)};
  }

  // One element: updates the moments m, v and the parameter p in place.
  TRAINRUN_HD void update(T& p, T grad, T& m, T& v) const {
    const T g = grad * grad_scale;
    const T mi = b1 * m + (T(1) - b1) * g;
    const T vi = b2 * v + (T(1) - b2) * g * g;
    m = mi;
    v = vi;
    const T mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    p -= lr * (mhat / (adamw_sqrt(vhat) + eps) + wd * p);
  }
};

}  // namespace trainrun
