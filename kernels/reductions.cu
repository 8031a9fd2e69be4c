// sum and sum of squares of a whole tensor, accumulated in double (as the CPU reference) and
// returned to the host. Deterministic two-pass reduction: a fixed grid of kBlocks blocks each
// reduces a fixed grid-stride subset into one double (warp shuffles, then the block's warps in
// order), then one block adds the kBlocks partials in order. No atomics: the same tensor gives
// the same bits every time. NaN and Inf propagate, so callers can detect a bad step.
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 1024;

__device__ double block_sum(double v) {
  __shared__ double part[kThreads / 32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double t = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) t += part[w];
  return t;  // valid in thread 0
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    sum_partial_kernel(double* partial, const T* x, int64_t n, bool squares) {
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    const double v = static_cast<double>(to_f32(x[i]));
    acc += squares ? v * v : v;
  }
  const double t = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = t;
}

__global__ void __launch_bounds__(kThreads)
    sum_finish_kernel(double* result, const double* partial, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) acc += partial[i];
  const double t = block_sum(acc);
  if (threadIdx.x == 0) *result = t;
}

}  // namespace

size_t reduce_scratch_bytes() {
  return sizeof(double) * (kBlocks + 1);
}

void sum_to(DType dt, const void* x, int64_t n, bool squares, void* scratch, double* result) {
  double* partial = static_cast<double*>(scratch);
  int64_t blocks = n <= 0 ? 0 : (n + kThreads - 1) / kThreads;
  if (blocks > kBlocks) blocks = kBlocks;
  if (blocks > 0)
    by_dtype(dt, squares ? "sum_squares" : "sum", [&](auto t) {
      using T = decltype(t);
      TRAINRUN_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, sum_partial_kernel<T>)
      (partial, static_cast<const T*>(x), n, squares);
    });
  // With no elements the finishing kernel alone writes the 0.
  TRAINRUN_LAUNCH(1, kThreads, 0, sum_finish_kernel)(result, partial, static_cast<int>(blocks));
  check_launch(squares ? "sum_squares" : "sum");
}

double sum(DType dt, const void* x, int64_t n, bool squares, void* scratch) {
  if (n <= 0) return 0.0;
  double* result = static_cast<double*>(scratch) + kBlocks;
  sum_to(dt, x, n, squares, scratch, result);
  double host = 0.0;
  const cudaError_t e = cudaMemcpy(&host, result, sizeof(double), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
    throw DeviceError(std::string("sum: copying the result to the host failed: ") +
                      cudaGetErrorString(e));
  return host;
}

}  // namespace trainrun::cuda
