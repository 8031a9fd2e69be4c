// TRAINRUN_HD marks the small inline helpers that host code and CUDA kernels share (shard split,
// dropout mask, bf16 rounding), so the CPU reference and the kernels compute them from one
// definition. Under nvcc it expands to __host__ __device__; under a plain C++ compiler to nothing.
#pragma once

#if defined(__CUDACC__)
#define TRAINRUN_HD __host__ __device__
#else
#define TRAINRUN_HD
#endif
