// Flat elementwise ops: fill, add, accumulate, scale, f32 <-> bf16 casts, and a column sum.
// Grid-stride loops over int64 indices, one element per thread per iteration; memory-bound, so
// nothing cleverer pays. Each thread reads an element before writing the same index, so `add`'s
// out may alias a or b.
//
// colsum (dbias += or = the sum over rows) is deterministic: pass 1 splits the rows into at
// most kChunks fixed chunks and each block sums one (chunk, 32-column tile) with a fixed in-block
// order; pass 2 adds the chunk partials per column in chunk order. No atomics, so the same
// inputs give the same bits on every run.
#include <string>

#include "column_chunks.cuh"
#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {

void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw DeviceError(std::string("CUDA kernel ") + kernel + " failed: " + cudaGetErrorString(e));
}

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

template <class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = add_rounded(a[i], b[i]);
}

template <class T>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<T>(to_f32(dst[i]) + to_f32(src[i]));
}

template <class T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) * s);
}

template <class T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(to_f32(out[i]) + to_f32(bias[i % cols]));
}

template <class D, class S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<D>(to_f32(src[i]));
}

// Pass 1 of colsum (column_chunks.cuh).
template <class T>
__global__ void colsum_partial_kernel(float* partial, const T* src, int64_t rows, int64_t cols,
                                      int64_t rows_per_chunk) {
  column_partials<1>(partial, rows, cols, rows_per_chunk,
                     [&](int64_t r, int64_t c, float* s) { s[0] += to_f32(src[r * cols + c]); });
}

}  // namespace

void fill(DType dt, void* x, double value, int64_t n) {
  if (n <= 0) return;
  const unsigned g = grid_for(n, kThreads);
  switch (dt) {
    case DType::f32:
      TRAINRUN_LAUNCH(g, kThreads, 0, fill_kernel<float>)
      (static_cast<float*>(x), static_cast<float>(value), n);
      break;
    case DType::bf16:
      TRAINRUN_LAUNCH(g, kThreads, 0, fill_kernel<bf16>)
      (static_cast<bf16*>(x), __float2bfloat16_rn(static_cast<float>(value)), n);
      break;
    case DType::i32:
      TRAINRUN_LAUNCH(g, kThreads, 0, fill_kernel<int32_t>)
      (static_cast<int32_t*>(x), static_cast<int32_t>(value), n);
      break;
    case DType::f64:
      TRAINRUN_LAUNCH(g, kThreads, 0, fill_kernel<double>)(static_cast<double*>(x), value, n);
      break;
  }
  check_launch("fill");
}

void add(DType dt, void* out, const void* a, const void* b, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "add", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, add_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  check_launch("add");
}

void accumulate(DType dt, void* dst, const void* src, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "accumulate", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, accumulate_kernel<T>)
    (static_cast<T*>(dst), static_cast<const T*>(src), n);
  });
  check_launch("accumulate");
}

void scale(DType dt, void* x, double s, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "scale", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, scale_kernel<T>)
    (static_cast<T*>(x), static_cast<float>(s), n);
  });
  check_launch("scale");
}

void cast(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) {
  if (n <= 0) return;
  by_dtype(dst_dt, "cast", [&](auto d) {
    using D = decltype(d);
    by_dtype(src_dt, "cast", [&](auto s) {
      using S = decltype(s);
      TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, cast_kernel<D, S>)
      (static_cast<D*>(dst), static_cast<const S*>(src), n);
    });
  });
  check_launch("cast");
}

void add_bias(DType dt, void* out, const void* bias, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  by_dtype(dt, "add_bias", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(rows * cols, kThreads), kThreads, 0, add_bias_kernel<T>)
    (static_cast<T*>(out), static_cast<const T*>(bias), rows, cols);
  });
  check_launch("add_bias");
}

size_t colsum_scratch_bytes(int64_t rows, int64_t cols) {
  return column_scratch_bytes(1, rows, cols);
}

void colsum(DType dt, DType gt, void* dst, const void* src, int64_t rows, int64_t cols,
            void* scratch, bool accumulate) {
  if (rows <= 0 || cols <= 0) return;
  const ColumnPlan plan = column_plan(rows, cols);
  float* partial = static_cast<float*>(scratch);
  by_dtype(dt, "colsum", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(plan.grid, plan.block, 0, colsum_partial_kernel<T>)
    (partial, static_cast<const T*>(src), rows, cols, plan.rows_per_chunk);
    by_grad_dtype<T>(dt, gt, "colsum", [&](auto g) {
      using G = decltype(g);
      finish_columns(ColumnSums<1, G>{{static_cast<G*>(dst)}, accumulate}, partial, plan.chunks,
                     cols);
    });
  });
  check_launch("colsum");
}

}  // namespace trainrun::cuda
