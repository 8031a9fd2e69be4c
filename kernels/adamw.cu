// Fused AdamW with decoupled weight decay over a contiguous range of the flat fp32 buffers, one
// grid-stride pass (memory-bound: 4 reads, 3 writes per element). The same arithmetic, in the
// same order and in fp32, as the CPU reference (src/backend/cpu/adamw.cpp):
//   m = b1 m + (1-b1) g ;  v = b2 v + (1-b2) g^2
//   p -= lr * ( mhat / (sqrt(vhat) + eps) + wd * p ),  mhat = m/(1-b1^t), vhat = v/(1-b2^t)
// The bias corrections depend only on the step and are computed on the host in double; g is the
// gradient times grad_scale (gradient clipping's factor), as on the CPU.
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             float lr, float b1, float b2, float eps, float wd, float inv_bc1,
                             float inv_bc2, float gs) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    const float p = param[i];
    param[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
  }
}

}  // namespace

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float inv_bias_corr1, float inv_bias_corr2,
           float grad_scale) {
  if (n <= 0) return;
  TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, adamw_kernel)
  (param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, inv_bias_corr1, inv_bias_corr2,
   grad_scale);
  check_launch("adamw");
}

}  // namespace trainrun::cuda
