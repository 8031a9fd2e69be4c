// Fused AdamW over a contiguous range of the flat fp32 buffers, one grid-stride pass
// (memory-bound: 4 reads, 3 writes per element), applying trainrun/core/adamw_update.h's element
// update: the very definition the CPU reference (src/backend/cpu/adamw.cpp) runs.
//
// adamw_runs: every parameter of a model in one launch. Weight decay differs per parameter
// (matrices yes, biases and norms no), which split the update into a launch per run of equal
// decay: about 100 for GPT-2 small, each a few microseconds of launch for a memory-bound pass.
// Here each block takes a chunk of kChunk elements, finds by binary search the run holding its
// first element, and each thread walks forward through the runs as its elements cross them.
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

constexpr int64_t kChunk = 8192;  // elements per block: 32 per thread

// runs: `count` sorted, disjoint [begin, end) with a decay flag; elements outside every run are
// left alone.
__global__ void adamw_runs_kernel(float* param, const float* grad, float* m, float* v,
                                  const AdamWRunDevice* runs, int count, int64_t n,
                                  AdamWStep<float> decay, AdamWStep<float> no_decay) {
  __shared__ int first;  // the run holding or following the chunk's first element
  const int64_t c0 = int64_t(blockIdx.x) * kChunk;
  if (threadIdx.x == 0) {
    int lo = 0, hi = count;  // the first run with end > c0
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (runs[mid].end <= c0)
        lo = mid + 1;
      else
        hi = mid;
    }
    first = lo;
  }
  __syncthreads();
  int k = first;
  const int64_t c1 = c0 + kChunk < n ? c0 + kChunk : n;
  for (int64_t i = c0 + threadIdx.x; i < c1; i += blockDim.x) {
    while (k < count && runs[k].end <= i) ++k;
    if (k == count) break;
    if (i < runs[k].begin) continue;  // between runs
    (runs[k].decay ? decay : no_decay).update(param[i], grad[i], m[i], v[i]);
  }
}

}  // namespace

void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRunDevice* runs,
                int count, int64_t n, const AdamWStep<float>& decay,
                const AdamWStep<float>& no_decay) {
  if (n <= 0 || count <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kChunk - 1) / kChunk);
  TRAINRUN_LAUNCH(blocks, kThreads, 0, adamw_runs_kernel)
  (param, grad, m, v, runs, count, n, decay, no_decay);
  check_launch("adamw_runs");
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWStep<float>& s) {
  if (n <= 0) return;
  TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, adamw_kernel)(param, grad, m, v, n, s);
  check_launch("adamw");
}

}  // namespace trainrun::cuda
