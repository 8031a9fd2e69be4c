// Rotary position embedding (GPT-NeoX / Hugging Face Llama "rotate_half" convention) on the q and
// k heads of qkv [B,T,(NH+2*NKV)*hd]. In each of the NH + NKV rotated heads the pair
// (x[i], x[i + hd/2]), i < hd/2, turns by angle t * theta^(-2i/hd), t the position along T.
// The angles, cosines and sines are computed in double for either T (once per row, shared by
// the row's heads), so f32 and the CUDA kernels (which do the same) differ only in the final
// multiply-adds. The backward applies the transposed rotation (angle -a) and accumulates or
// overwrites; v passes through. Each pair is read before it is written, so out may alias in.
// Rows are independent: parallel over B*T.
// With document masking the position is the offset in the document, t - doc_start[b,t].
#include <cmath>
#include <vector>

#include "kernels.h"
#include "trainrun/core/documents.h"

namespace trainrun::cpu {

namespace {

// cos/sin of the row's hd/2 angles into cs[0..half) and sn[0..half).
void row_angles(std::vector<double>& cs, std::vector<double>& sn, int64_t t, int64_t hd,
                double theta) {
  const int64_t half = hd / 2;
  cs.resize(half);
  sn.resize(half);
  for (int64_t i = 0; i < half; ++i) {
    const double a =
        static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / double(hd));
    cs[i] = std::cos(a);
    sn[i] = std::sin(a);
  }
}

// Forward: out = R x. Backward: out = R^T x, or out += R^T x when accumulating.
template <class T, bool kBackward>
void rope_rows(T* out, const T* in, int64_t B, int64_t T_, int NH, int NKV, int64_t hd,
               double theta, const int32_t* doc_start, bool accumulate) {
  const int64_t half = hd / 2, rotated = (NH + int64_t{NKV}) * hd, W = (NH + 2 * int64_t{NKV}) * hd;
#pragma omp parallel for
  for (int64_t row = 0; row < B * T_; ++row) {
    thread_local std::vector<double> cs, sn;
    const int64_t b = row / T_, t = row % T_;
    row_angles(cs, sn, t - first_key(doc_start, b, T_, t), hd, theta);
    const T* x = in + row * W;
    T* y = out + row * W;
    for (int64_t h0 = 0; h0 < rotated; h0 += hd) {
      for (int64_t i = 0; i < half; ++i) {
        const T a = x[h0 + i], b = x[h0 + half + i];
        const T c = static_cast<T>(cs[i]), s = static_cast<T>(kBackward ? -sn[i] : sn[i]);
        const T ya = a * c - b * s, yb = b * c + a * s;
        y[h0 + i] = accumulate ? y[h0 + i] + ya : ya;
        y[h0 + half + i] = accumulate ? y[h0 + half + i] + yb : yb;
      }
    }
    for (int64_t c = rotated; c < W; ++c) y[c] = accumulate ? y[c] + x[c] : x[c];
  }
}

}  // namespace

template <class T>
void rope_forward(T* out, const T* in, int64_t B, int64_t T_, int NH, int NKV, int64_t hd,
                  double theta, const int32_t* doc_start) {
  rope_rows<T, false>(out, in, B, T_, NH, NKV, hd, theta, doc_start, false);
}

template <class T>
void rope_backward(T* din, const T* dout, int64_t B, int64_t T_, int NH, int NKV, int64_t hd,
                   double theta, const int32_t* doc_start, bool accumulate) {
  rope_rows<T, true>(din, dout, B, T_, NH, NKV, hd, theta, doc_start, accumulate);
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int, int, int64_t, double,
                                  const int32_t*);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int, int, int64_t,
                                   double, const int32_t*);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int, int, int64_t,
                                   double, const int32_t*, bool);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int, int, int64_t,
                                    double, const int32_t*, bool);

}  // namespace trainrun::cpu
