// Inverted dropout whose mask is a pure function of (seed, element index), bit-identical to the
// CPU reference (src/backend/cpu/dropout.cpp): splitmix64's finaliser applied twice,
//   key = mix(seed);  u = mix(key + (index + 1) * 0x9E3779B97F4A7C15)
//   keep  iff  (u >> 40) >= floor(p * 2^24)
// so a run can move between devices and a resume redraws the same masks; the backward recomputes
// the mask instead of storing it. key, threshold and 1/(1-p) are computed on the host exactly as
// the CPU does. p == 0 keeps everything with scale 1 (an exact copy).
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ bool keeps(uint64_t key, uint64_t index, uint32_t thresh) {
  return static_cast<uint32_t>(mix64(key + (index + 1) * kGolden) >> 40) >= thresh;
}

uint32_t threshold(float p) {
  return static_cast<uint32_t>(double(p) * 16777216.0);
}

template <class T>
__global__ void dropout_forward_kernel(T* out, const T* in, int64_t n, uint64_t key,
                                       uint32_t thresh, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = keeps(key, static_cast<uint64_t>(i), thresh) ? from_f32<T>(to_f32(in[i]) * s)
                                                          : from_f32<T>(0.0f);
}

template <class T>
__global__ void dropout_backward_kernel(T* din, const T* dout, int64_t n, uint64_t key,
                                        uint32_t thresh, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    if (keeps(key, static_cast<uint64_t>(i), thresh))
      din[i] = from_f32<T>(to_f32(din[i]) + to_f32(dout[i]) * s);
}

}  // namespace

void dropout_forward(DType dt, void* out, const void* in, int64_t n, float p, uint64_t seed) {
  if (n <= 0) return;
  const float s = static_cast<float>(1.0 / (1.0 - double(p)));
  by_dtype(dt, "dropout", [&](auto t) {
    using T = decltype(t);
    dropout_forward_kernel<T><<<grid_for(n, kThreads), kThreads>>>(
        static_cast<T*>(out), static_cast<const T*>(in), n, mix64(seed), threshold(p), s);
  });
  check_launch("dropout_forward");
}

void dropout_backward(DType dt, void* din, const void* dout, int64_t n, float p, uint64_t seed) {
  if (n <= 0) return;
  const float s = static_cast<float>(1.0 / (1.0 - double(p)));
  by_dtype(dt, "dropout_backward", [&](auto t) {
    using T = decltype(t);
    dropout_backward_kernel<T><<<grid_for(n, kThreads), kThreads>>>(
        static_cast<T*>(din), static_cast<const T*>(dout), n, mix64(seed), threshold(p), s);
  });
  check_launch("dropout_backward");
}

}  // namespace trainrun::cuda
