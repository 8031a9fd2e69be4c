// RMSNorm over the last dim, eps 1e-5 (Llama), fp32 arithmetic whatever the storage type; the CPU
// reference is src/backend/cpu/rmsnorm.cpp.
//   out = in * rstd * w,  rstd = 1 / sqrt(mean(in^2) + eps)  (saved for the backward)
// Forward: one warp per row (8 rows per 256-thread block): sum of squares, then the write; lanes
// read 16-byte packs where C and the pointers allow it (pack.cuh), as in layernorm.cu.
// residual_rmsnorm folds the residual add into the first pass, as layernorm.cu does.
// Backward: din += rstd * (gw - in * rstd^2 * mean(gw * in)), gw = dout * w, one warp per row.
// dw = sum over rows of dout * in * rstd, without atomics in two deterministic passes (as
// layernorm.cu): pass 1 gives each block one (32-column tile, row chunk) and writes fp32 partial
// sums to scratch, pass 2 adds the chunk partials per column in chunk order.
#include "column_chunks.cuh"
#include "common.cuh"
#include "launch.h"
#include "residual_row.cuh"

namespace trainrun::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarps = 8;

// res null: the row is `in`; else sum = in + res, written and then normalised (as layernorm.cu).
template <int W, class T, class S>
__global__ void rmsnorm_forward_kernel(T* out, S* rstd, T* sum, const T* in, const T* res,
                                       const T* w, int64_t rows, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together: no block barrier below
  const float ss = residual_row_sum<W>(sum, in, res, row * C, lane, C, /*squares=*/true);
  const T* x = (res ? sum : in) + row * C;
  const float r = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(C) + kEps);
  T* o = out + row * C;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> p = load_vec<W>(x + c), wv = load_vec<W>(w + c);
    Vec<T, W> y;
    for (int k = 0; k < W; ++k) y[k] = from_f32<T>(to_f32(p[k]) * r * to_f32(wv[k]));
    store_vec<W>(o + c, y);
  });
  if (lane == 0) rstd[row] = from_f32<S>(r);
}

template <int W, class T, class S>
__global__ void rmsnorm_backward_din_kernel(T* din, const T* dout, const T* in, const T* w,
                                            const S* rstd, int64_t rows, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = in + row * C;
  const T* g = dout + row * C;
  const float r = to_f32(rstd[row]);
  float dot = 0.0f;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> gv = load_vec<W>(g + c), wv = load_vec<W>(w + c), xv = load_vec<W>(x + c);
    for (int j = 0; j < W; ++j) dot += to_f32(gv[j]) * to_f32(wv[j]) * to_f32(xv[j]);
  });
  const float k = warp_sum(dot) / static_cast<float>(C) * r * r;
  T* dx = din + row * C;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> gv = load_vec<W>(g + c), wv = load_vec<W>(w + c), xv = load_vec<W>(x + c);
    float d[W];
    for (int j = 0; j < W; ++j) d[j] = (to_f32(gv[j]) * to_f32(wv[j]) - to_f32(xv[j]) * k) * r;
    store_grads<W>(dx + c, d, true);
  });
}

// Pass 1 of dw (column_chunks.cuh): partial layout [chunks][C].
template <class T, class S>
__global__ void rmsnorm_dw_partial_kernel(float* partial, const T* dout, const T* in, const S* rstd,
                                          int64_t rows, int64_t C, int64_t rows_per_chunk) {
  column_partials<1>(partial, rows, C, rows_per_chunk, [&](int64_t r, int64_t c, float* s) {
    s[0] += to_f32(dout[r * C + c]) * to_f32(in[r * C + c]) * to_f32(rstd[r]);
  });
}

}  // namespace

void rmsnorm_forward(DType dt, DType st, void* out, void* rstd, void* sum, const void* in,
                     const void* res, const void* w, int64_t rows, int64_t C) {
  if (rows <= 0 || C <= 0) return;
  by_dtypes(dt, st, "rmsnorm", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    by_pack<kPack<T>>(packable<kPack<T>>(C, {out, sum, in, res, w}), [&](auto pw) {
      TRAINRUN_LAUNCH(grid, kWarps * 32, 0, rmsnorm_forward_kernel<decltype(pw)::value, T, S>)
      (static_cast<T*>(out), static_cast<S*>(rstd), static_cast<T*>(sum), static_cast<const T*>(in),
       static_cast<const T*>(res), static_cast<const T*>(w), rows, C);
    });
  });
  check_launch("rmsnorm_forward");
}

size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t C) {
  return column_scratch_bytes(1, rows, C);
}

void rmsnorm_backward(DType dt, DType st, DType gt, void* din, void* dw, const void* dout,
                      const void* in, const void* w, const void* rstd, int64_t rows, int64_t C,
                      void* scratch, bool param_accumulate) {
  if (rows <= 0 || C <= 0) return;
  const ColumnPlan plan = column_plan(rows, C);
  by_dtypes(dt, st, "rmsnorm_backward", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    by_pack<kPack<T>>(packable<kPack<T>>(C, {din, dout, in, w}), [&](auto pw) {
      TRAINRUN_LAUNCH(grid, kWarps * 32, 0, rmsnorm_backward_din_kernel<decltype(pw)::value, T, S>)
      (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in),
       static_cast<const T*>(w), static_cast<const S*>(rstd), rows, C);
    });
    float* partial = static_cast<float*>(scratch);
    TRAINRUN_LAUNCH(plan.grid, plan.block, 0, rmsnorm_dw_partial_kernel<T, S>)
    (partial, static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const S*>(rstd),
     rows, C, plan.rows_per_chunk);
    by_grad_dtype<T>(dt, gt, "rmsnorm_backward", [&](auto g) {
      using G = decltype(g);
      finish_columns(ColumnSums<1, G>{{static_cast<G*>(dw)}, param_accumulate}, partial,
                     plan.chunks, C);
    });
  });
  check_launch("rmsnorm_backward");
}

}  // namespace trainrun::cuda
