// LayerNorm over the last dim, eps 1e-5 (GPT-2), fp32 arithmetic whatever the storage type.
//
// Forward: one warp per row (8 rows per 256-thread block), each lane reading 16-byte packs of the
// row where C and the pointers allow it (pack.cuh), else single elements. Two passes over the row
// in registers' stead of shared memory: mean, then the variance of the centred values (as the CPU
// reference: more accurate than E[x^2] - m^2), then the write. The row is re-read from global
// memory, which L1/L2 serve for rows up to tens of KB. mean and rstd are saved for the backward.
// residual_layernorm is the same kernel with the block's residual add folded into the first
// pass (residual_row_sum, residual_row.cuh): the add's separate pass over three [rows,C] tensors
// goes, and the sum is rounded as stored before it is normalised, so the result equals add()
// then layernorm() bit for bit.
//
// Backward, llm.c style:
//   din += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),  dnorm = dout * w
// one warp per row, as the forward. dw/db are sums over rows; instead of atomics they take two
// deterministic passes: pass 1 gives each block one (32-column tile, row chunk) and writes the
// fp32 partial sums to scratch, pass 2 adds the chunk partials per column in chunk order.
#include "column_chunks.cuh"
#include "common.cuh"
#include "launch.h"
#include "residual_row.cuh"

namespace trainrun::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarps = 8;

// With a residual (residual_layernorm), the row normalised is sum = in + res, written to `sum`
// in the first pass and read back from it (each lane rereads only the elements it wrote, so no
// barrier is needed); without one (res null), the row is `in` itself.
template <int W, class T, class S>
__global__ void layernorm_forward_kernel(T* out, S* mean, S* rstd, T* sum, const T* in,
                                         const T* res, const T* w, const T* b, int64_t rows,
                                         int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together: no block barrier below
  const float s = residual_row_sum<W>(sum, in, res, row * C, lane, C);
  const T* x = (res ? sum : in) + row * C;
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> p = load_vec<W>(x + c);
    for (int k = 0; k < W; ++k) {
      const float d = to_f32(p[k]) - m;
      v += d * d;
    }
  });
  const float var = warp_sum(v) / static_cast<float>(C);
  const float r = 1.0f / sqrtf(var + kEps);
  T* o = out + row * C;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> p = load_vec<W>(x + c), wv = load_vec<W>(w + c), bv = load_vec<W>(b + c);
    Vec<T, W> y;
    for (int k = 0; k < W; ++k)
      y[k] = from_f32<T>((to_f32(p[k]) - m) * r * to_f32(wv[k]) + to_f32(bv[k]));
    store_vec<W>(o + c, y);
  });
  if (lane == 0) {
    mean[row] = from_f32<S>(m);
    rstd[row] = from_f32<S>(r);
  }
}

template <int W, class T, class S>
__global__ void layernorm_backward_din_kernel(T* din, const T* dout, const T* in, const T* w,
                                              const S* mean, const S* rstd, int64_t rows,
                                              int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = in + row * C;
  const T* g = dout + row * C;
  const float m = to_f32(mean[row]), r = to_f32(rstd[row]);
  float a = 0.0f, bsum = 0.0f;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> gv = load_vec<W>(g + c), wv = load_vec<W>(w + c), xv = load_vec<W>(x + c);
    for (int k = 0; k < W; ++k) {
      const float dnorm = to_f32(gv[k]) * to_f32(wv[k]);
      a += dnorm;
      bsum += dnorm * (to_f32(xv[k]) - m) * r;
    }
  });
  const float dnorm_mean = warp_sum(a) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(bsum) / static_cast<float>(C);
  T* dx = din + row * C;
  for_lane_packs<W>(C, lane, [&](int64_t c) {
    const Vec<T, W> gv = load_vec<W>(g + c), wv = load_vec<W>(w + c), xv = load_vec<W>(x + c);
    float d[W];
    for (int k = 0; k < W; ++k) {
      const float norm = (to_f32(xv[k]) - m) * r;
      d[k] = (to_f32(gv[k]) * to_f32(wv[k]) - dnorm_mean - norm * dnorm_norm_mean) * r;
    }
    store_grads<W>(dx + c, d, true);
  });
}

// Pass 1 of dw and db (column_chunks.cuh): partial layout [2][chunks][C], dw then db.
template <class T, class S>
__global__ void layernorm_param_partial_kernel(float* partial, const T* dout, const T* in,
                                               const S* mean, const S* rstd, int64_t rows,
                                               int64_t C, int64_t rows_per_chunk) {
  column_partials<2>(partial, rows, C, rows_per_chunk, [&](int64_t r, int64_t c, float* s) {
    const float g = to_f32(dout[r * C + c]);
    s[0] += g * (to_f32(in[r * C + c]) - to_f32(mean[r])) * to_f32(rstd[r]);
    s[1] += g;
  });
}

}  // namespace

void layernorm_forward(DType dt, DType st, void* out, void* mean, void* rstd, void* sum,
                       const void* in, const void* res, const void* w, const void* b, int64_t rows,
                       int64_t C) {
  if (rows <= 0 || C <= 0) return;
  by_dtypes(dt, st, "layernorm", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    by_pack<kPack<T>>(packable<kPack<T>>(C, {out, sum, in, res, w, b}), [&](auto pw) {
      TRAINRUN_LAUNCH(grid, kWarps * 32, 0, layernorm_forward_kernel<decltype(pw)::value, T, S>)
      (static_cast<T*>(out), static_cast<S*>(mean), static_cast<S*>(rstd), static_cast<T*>(sum),
       static_cast<const T*>(in), static_cast<const T*>(res), static_cast<const T*>(w),
       static_cast<const T*>(b), rows, C);
    });
  });
  check_launch("layernorm_forward");
}

size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t C) {
  return column_scratch_bytes(2, rows, C);
}

void layernorm_backward(DType dt, DType st, DType gt, void* din, void* dw, void* db,
                        const void* dout, const void* in, const void* w, const void* mean,
                        const void* rstd, int64_t rows, int64_t C, void* scratch,
                        bool param_accumulate) {
  if (rows <= 0 || C <= 0) return;
  const ColumnPlan plan = column_plan(rows, C);
  by_dtypes(dt, st, "layernorm_backward", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    by_pack<kPack<T>>(packable<kPack<T>>(C, {din, dout, in, w}), [&](auto pw) {
      TRAINRUN_LAUNCH(grid, kWarps * 32, 0,
                      layernorm_backward_din_kernel<decltype(pw)::value, T, S>)
      (static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in),
       static_cast<const T*>(w), static_cast<const S*>(mean), static_cast<const S*>(rstd), rows, C);
    });
    float* partial = static_cast<float*>(scratch);
    TRAINRUN_LAUNCH(plan.grid, plan.block, 0, layernorm_param_partial_kernel<T, S>)
    (partial, static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const S*>(mean),
     static_cast<const S*>(rstd), rows, C, plan.rows_per_chunk);
    by_grad_dtype<T>(dt, gt, "layernorm_backward", [&](auto g) {
      using G = decltype(g);
      finish_columns(ColumnSums<2, G>{{static_cast<G*>(dw), static_cast<G*>(db)}, param_accumulate},
                     partial, plan.chunks, C);
    });
  });
  check_launch("layernorm_backward");
}

}  // namespace trainrun::cuda
