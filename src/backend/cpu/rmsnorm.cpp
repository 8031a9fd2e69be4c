// RMSNorm over the last dim (eps 1e-5, as Llama): out = in * rstd * w, with
// rstd = 1 / sqrt(mean(in^2) + eps) saved for the backward. No mean is subtracted, no bias.
// Backward: with gw = dout * w,  din = rstd * (gw - in * rstd^2 * mean(gw * in)),
//   dw += sum over rows of dout * in * rstd.
// As layernorm.cpp: din in a row-parallel loop, dw in a second loop in which threads own column
// blocks and walk the rows, so no atomics and the result is deterministic at any thread count.
#include <cmath>

#include "column_sums.h"
#include "kernels.h"

namespace trainrun::cpu {

namespace {
constexpr double kRmsNormEps = 1e-5;
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* w, int64_t rows, int64_t C) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    const T s = static_cast<T>(1) / std::sqrt(ss / static_cast<T>(C) + static_cast<T>(kRmsNormEps));
    T* o = out + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * s * w[c];
    rstd[r] = s;
  }
}

template <class T>
void rmsnorm_backward(T* din, T* dw, const T* dout, const T* in, const T* w, const T* rstd,
                      int64_t rows, int64_t C, bool param_acc) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = in + r * C;
    const T* g = dout + r * C;
    const T s = rstd[r];
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += g[c] * w[c] * x[c];
    const T k = dot / static_cast<T>(C) * s * s;
    T* dx = din + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] += (g[c] * w[c] - x[c] * k) * s;
  }
  T* const dst[1] = {dw};
  column_sums<1>(dst, param_acc, rows, C,
                 [&](int64_t r, int64_t c0, int64_t c1, T(&s)[1][kColumnBlock]) {
                   const T* x = in + r * C;
                   const T* g = dout + r * C;
                   const T rs = rstd[r];
                   for (int64_t c = c0; c < c1; ++c) s[0][c - c0] += g[c] * x[c] * rs;
                 });
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t, bool);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t, bool);

}  // namespace trainrun::cpu
