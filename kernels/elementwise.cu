// Flat elementwise ops: fill, add, accumulate, scale, f32 <-> bf16 casts, and a column sum.
// Grid-stride loops over int64 indices, one 16-byte pack (or, where a pointer or the length does
// not allow it, one element: pack.cuh) per thread per iteration; memory-bound, so nothing
// cleverer pays. Each thread reads a pack before writing the same indices, so `add`'s out may
// alias a or b.
//
// colsum (dbias += or = the sum over rows) is deterministic: pass 1 splits the rows into at
// most kChunks fixed chunks and each block sums one (chunk, 32-column tile) with a fixed in-block
// order; pass 2 adds the chunk partials per column in chunk order. No atomics, so the same
// inputs give the same bits on every run.
#include <string>
#include <type_traits>

#include "column_chunks.cuh"
#include "common.cuh"
#include "launch.h"
#include "pack.cuh"

namespace trainrun::cuda {

void check_launch(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw DeviceError(std::string("CUDA kernel ") + kernel + " failed: " + cudaGetErrorString(e));
}

namespace {

constexpr int kThreads = 256;

// W elements a thread per access (pack.cuh): 16-byte vectors when every pointer is aligned and
// n (add_bias: cols) is a multiple of W, else one element.
template <int W, class T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  Vec<T, W> r;
  for (int k = 0; k < W; ++k) r[k] = value;
  for_each_pack<W>(n, [&](int64_t i) { store_vec<W>(x + i, r); });
}

template <int W, class T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    const Vec<T, W> x = load_vec<W>(a + i), y = load_vec<W>(b + i);
    Vec<T, W> r;
    for (int k = 0; k < W; ++k) r[k] = add_rounded(x[k], y[k]);
    store_vec<W>(out + i, r);
  });
}

template <int W, class T>
__global__ void accumulate_kernel(T* dst, const T* src, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    const Vec<T, W> s = load_vec<W>(src + i);
    float g[W];
    for (int k = 0; k < W; ++k) g[k] = to_f32(s[k]);
    store_grads<W>(dst + i, g, true);
  });
}

template <int W, class T>
__global__ void scale_kernel(T* x, float s, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    Vec<T, W> r = load_vec<W>(x + i);
    for (int k = 0; k < W; ++k) r[k] = from_f32<T>(to_f32(r[k]) * s);
    store_vec<W>(x + i, r);
  });
}

// W divides cols, so a pack never straddles two rows and its bias is one pack too.
template <int W, class T>
__global__ void add_bias_kernel(T* out, const T* bias, int64_t rows, int64_t cols) {
  for_each_pack<W>(rows * cols, [&](int64_t i) {
    Vec<T, W> r = load_vec<W>(out + i);
    const Vec<T, W> b = load_vec<W>(bias + i % cols);
    for (int k = 0; k < W; ++k) r[k] = add_rounded(r[k], b[k]);
    store_vec<W>(out + i, r);
  });
}

template <int W, class D, class S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for_each_pack<W>(n, [&](int64_t i) {
    const Vec<S, W> s = load_vec<W>(src + i);
    Vec<D, W> r;
    for (int k = 0; k < W; ++k) r[k] = from_f32<D>(to_f32(s[k]));
    store_vec<W>(dst + i, r);
  });
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
  const auto typed = [&](auto v) {
    using T = decltype(v);
    launch_packed<kPack<T>>(n, packable<kPack<T>>(n, {x}), kThreads, [&](auto w, unsigned g) {
      TRAINRUN_LAUNCH(g, kThreads, 0, fill_kernel<decltype(w)::value, T>)
      (static_cast<T*>(x), v, n);
    });
  };
  switch (dt) {
    case DType::f32:
      typed(static_cast<float>(value));
      break;
    case DType::bf16:
      typed(__float2bfloat16_rn(static_cast<float>(value)));
      break;
    case DType::i32:
      typed(static_cast<int32_t>(value));
      break;
    case DType::f64:
      typed(value);
      break;
  }
  check_launch("fill");
}

void add(DType dt, void* out, const void* a, const void* b, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "add", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        n, packable<kPack<T>>(n, {out, a, b}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, add_kernel<decltype(w)::value, T>)
          (static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
        });
  });
  check_launch("add");
}

void accumulate(DType dt, void* dst, const void* src, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "accumulate", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        n, packable<kPack<T>>(n, {dst, src}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, accumulate_kernel<decltype(w)::value, T>)
          (static_cast<T*>(dst), static_cast<const T*>(src), n);
        });
  });
  check_launch("accumulate");
}

void scale(DType dt, void* x, double s, int64_t n) {
  if (n <= 0) return;
  by_dtype(dt, "scale", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(n, packable<kPack<T>>(n, {x}), kThreads, [&](auto w, unsigned g) {
      TRAINRUN_LAUNCH(g, kThreads, 0, scale_kernel<decltype(w)::value, T>)
      (static_cast<T*>(x), static_cast<float>(s), n);
    });
  });
  check_launch("scale");
}

void cast(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n) {
  if (n <= 0) return;
  by_dtype(dst_dt, "cast", [&](auto d) {
    using D = decltype(d);
    by_dtype(src_dt, "cast", [&](auto s) {
      using S = decltype(s);
      // One width for both sides: the wider type's pack (4 when either is f32).
      using Wide = std::conditional_t<(sizeof(D) > sizeof(S)), D, S>;
      launch_packed<kPack<Wide>>(
          n, packable<kPack<Wide>>(n, {dst, src}), kThreads, [&](auto w, unsigned g) {
            TRAINRUN_LAUNCH(g, kThreads, 0, cast_kernel<decltype(w)::value, D, S>)
            (static_cast<D*>(dst), static_cast<const S*>(src), n);
          });
    });
  });
  check_launch("cast");
}

void add_bias(DType dt, void* out, const void* bias, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  by_dtype(dt, "add_bias", [&](auto t) {
    using T = decltype(t);
    launch_packed<kPack<T>>(
        rows * cols, packable<kPack<T>>(cols, {out, bias}), kThreads, [&](auto w, unsigned g) {
          TRAINRUN_LAUNCH(g, kThreads, 0, add_bias_kernel<decltype(w)::value, T>)
          (static_cast<T*>(out), static_cast<const T*>(bias), rows, cols);
        });
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
