// LayerNorm over the last dim (eps 1e-5, as GPT-2). Forward: one row per iteration, rows in
// parallel, two passes (mean, then variance of the centred values: more accurate than E[x^2]-m^2
// in f32). mean and rstd are saved so the backward needs no statistics pass.
// Backward, llm.c style: din needs per-row sums, dw/db need per-column sums over rows. Doing both
// in one row-parallel loop would race on dw/db, so the parameter gradients take a second loop in
// which threads own column blocks and walk the rows: no atomics, deterministic at any thread count.
// The row sums are `omp simd` reductions: as plain loops they are one dependent add per element
// (a float sum may not be reordered otherwise), which made both passes latency-bound and the
// layernorms twice as slow as PyTorch's. The order is fixed per build, so results stay
// deterministic.
#include <cmath>

#include "column_sums.h"
#include "kernels.h"

namespace trainrun::cpu {

namespace {
constexpr double kLayerNormEps = 1e-5;
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* in, const T* w, const T* b, int64_t rows,
                       int64_t C) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * C;
    T m = 0;
#pragma omp simd reduction(+ : m)
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m /= static_cast<T>(C);
    T var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var /= static_cast<T>(C);
    const T s = static_cast<T>(1) / std::sqrt(var + static_cast<T>(kLayerNormEps));
    T* o = out + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

template <class T>
void layernorm_backward(T* din, T* dw, T* db, const T* dout, const T* in, const T* w, const T* mean,
                        const T* rstd, int64_t rows, int64_t C, bool param_acc) {
  // din = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * C;
    const T* g = dout + r * C;
    const T m = mean[r], s = rstd[r];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int64_t c = 0; c < C; ++c) {
      const T dnorm = g[c] * w[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (x[c] - m) * s;
    }
    dnorm_mean /= static_cast<T>(C);
    dnorm_norm_mean /= static_cast<T>(C);
    T* dx = din + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      dx[c] += (g[c] * w[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  T* const dst[2] = {dw, db};
  column_sums<2>(dst, param_acc, rows, C,
                 [&](int64_t r, int64_t c0, int64_t c1, T(&s)[2][kColumnBlock]) {
                   const T* x = in + r * C;
                   const T* g = dout + r * C;
                   const T m = mean[r], rs = rstd[r];
#pragma omp simd
                   for (int64_t c = c0; c < c1; ++c) {
                     s[0][c - c0] += g[c] * (x[c] - m) * rs;
                     s[1][c - c0] += g[c];
                   }
                 });
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t, int64_t,
                                        bool);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int64_t,
                                         int64_t, bool);

}  // namespace trainrun::cpu
