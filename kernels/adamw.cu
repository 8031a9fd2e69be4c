// Fused AdamW over a contiguous range of the flat fp32 buffers, one grid-stride pass
// (memory-bound: 4 reads, 3 writes per element), applying trainrun/core/adamw_update.h's element
// update: the very definition the CPU reference (src/backend/cpu/adamw.cpp) runs.
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWStep<float> s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    s.update(param[i], grad[i], m[i], v[i]);
}

}  // namespace

void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWStep<float>& s) {
  if (n <= 0) return;
  TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, adamw_kernel)(param, grad, m, v, n, s);
  check_launch("adamw");
}

}  // namespace trainrun::cuda
