// Dense layer GEMMs. f32 goes through oneDNN's row-major dnnl_sgemm, the fastest sgemm measured
// on our CPUs (it picks AVX-512 itself and runs on our OpenMP threads). The forward seeds `out`
// with the bias and runs with beta=1, so the bias costs one streaming pass and no second sweep;
// the backward GEMMs use beta=1 because gradients accumulate, beta=0 where the caller says
// GradWrite::overwrite (a module's private din; a parameter's first gradient of the step), so no
// pass zeroes those buffers and no GEMM reads the zeros back. f64 exists only
// for gradient checks at test sizes: plain OpenMP loops, parallel over output rows so no two
// threads share a write.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "column_sums.h"
#include "kernels.h"
#include "sgemm.h"

namespace trainrun::cpu {
namespace {

// out rows start as the bias (or zero) so the GEMM can add onto them.
template <class T>
void seed_rows_with_bias(T* out, const T* bias, int64_t N, int64_t OC) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* o = out + n * OC;
    if (bias)
      std::memcpy(o, bias, sizeof(T) * OC);
    else
      std::memset(o, 0, sizeof(T) * OC);
  }
}

// dbias[o] (+)= sum_n dout[n, o] (column_sums.h).
template <class T>
void colsum(T* dbias, const T* dout, int64_t N, int64_t OC, bool acc) {
  T* const dst[1] = {dbias};
  column_sums<1>(dst, acc, N, OC, [&](int64_t n, int64_t o0, int64_t o1, T(&s)[1][kColumnBlock]) {
    const T* d = dout + n * OC;
    for (int64_t o = o0; o < o1; ++o) s[0][o - o0] += d[o];
  });
}

}  // namespace

template <class T>
void matmul_forward(T* out, const T* in, const T* w, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    seed_rows_with_bias(out, bias, N, OC);
    sgemm('N', 'T', N, OC, C, in, C, w, C, 1.0f, out, OC);
  } else {
#pragma omp parallel for
    for (int64_t n = 0; n < N; ++n) {
      const T* x = in + n * C;
      for (int64_t o = 0; o < OC; ++o) {
        const T* wr = w + o * C;
        T acc = bias ? bias[o] : T(0);
        for (int64_t c = 0; c < C; ++c) acc += x[c] * wr[c];
        out[n * OC + o] = acc;
      }
    }
  }
}

template <class T>
void matmul_backward(T* din, T* dw, T* dbias, const T* dout, const T* in, const T* w, int64_t N,
                     int64_t C, int64_t OC, bool acc, bool param_acc) {
  if constexpr (std::is_same_v<T, float>) {
    if (din) sgemm('N', 'N', N, C, OC, dout, OC, w, C, acc ? 1.0f : 0.0f, din, C);
    if (dw) sgemm('T', 'N', OC, C, N, dout, OC, in, C, param_acc ? 1.0f : 0.0f, dw, C);
  } else {
    if (din) {
#pragma omp parallel for
      for (int64_t n = 0; n < N; ++n) {
        T* dx = din + n * C;
        if (!acc) std::fill(dx, dx + C, T(0));
        for (int64_t o = 0; o < OC; ++o) {
          const T g = dout[n * OC + o];
          const T* wr = w + o * C;
          for (int64_t c = 0; c < C; ++c) dx[c] += g * wr[c];
        }
      }
    }
    if (!dw) return;
#pragma omp parallel for
    for (int64_t o = 0; o < OC; ++o) {
      T* dwr = dw + o * C;
      if (!param_acc) std::fill(dwr, dwr + C, T(0));
      for (int64_t n = 0; n < N; ++n) {
        const T g = dout[n * OC + o];
        const T* x = in + n * C;
        for (int64_t c = 0; c < C; ++c) dwr[c] += g * x[c];
      }
    }
  }
  if (dbias) colsum(dbias, dout, N, OC, param_acc);
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t, bool, bool);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t, bool, bool);

}  // namespace trainrun::cpu
