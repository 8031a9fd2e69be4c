// Rotary position embedding (GPT-NeoX / Hugging Face Llama "rotate_half") on the q and k heads of
// qkv [B,T,(NH+2*NKV)*hd]; the CPU reference is src/backend/cpu/rope.cpp. In each rotated head
// the pair (x[i], x[i + hd/2]), i < hd/2, turns by angle t * theta^(-2i/hd), t the position.
// One thread per pair (or per v element, which is copied forward and added backward when
// accumulating), grid-stride over rows * (pairs + v columns). A thread reads its own pair before
// it writes it, so out may alias in; then, with nothing to add, v is already in place and no thread
// touches it (the model turns q and k in place both ways). With document starts (documents.h) the
// position is the offset in the row's document, t - first_key, so each packed document is rotated
// as if it began the row. The angle and its cosine and sine are computed in double, as the CPU
// does, because a position near 1e3 times an fp32 frequency would already be off by ~1e-4 rad; the
// rotation itself is fp32.
#include <cmath>

#include "common.cuh"
#include "launch.h"
#include "trainrun/core/documents.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

struct RopeGeometry {
  int64_t rows, T, hd, half, pairs, v_cols, W;  // pairs = (NH+NKV)*hd/2 per row
  int64_t v_work;                               // v columns to write: v_cols, or 0 in place
  double log_theta;
  const int32_t* doc_start;  // [B,T] document starts (documents.h), or nullptr
  bool accumulate;           // backward: din += (else =, din never read)
};

// kBackward: din (+)= R^T dout (angle -a), v: din (+)= dout. Forward: out = R in, v copied.
template <class T, bool kBackward>
__global__ void rope_kernel(T* out, const T* in, RopeGeometry g) {
  const int64_t per_row = g.pairs + g.v_work, n = g.rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / per_row, k = idx % per_row;
    if (k >= g.pairs) {  // a v element
      const int64_t c = row * g.W + (g.W - g.v_cols) + (k - g.pairs);
      store_grad(out + c, to_f32(in[c]), g.accumulate);  // forward: accumulate is false
      continue;
    }
    const int64_t head = k / g.half, i = k % g.half, t = row % g.T;
    const int64_t pos = t - first_key(g.doc_start, row / g.T, g.T, t);
    const double angle = static_cast<double>(pos) * exp(-2.0 * static_cast<double>(i) /
                                                        static_cast<double>(g.hd) * g.log_theta);
    double sn, cs;
    sincos(angle, &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(kBackward ? -sn : sn);
    const int64_t lo = row * g.W + head * g.hd + i, hi = lo + g.half;
    const float a = to_f32(in[lo]), b = to_f32(in[hi]);
    const float ya = a * c - b * s, yb = b * c + a * s;
    store_grad(out + lo, ya, g.accumulate);
    store_grad(out + hi, yb, g.accumulate);
  }
}

RopeGeometry geometry(const void* out, const void* in, int64_t B, int64_t T_, int NH, int NKV,
                      int64_t hd, float theta, const int32_t* doc_start, bool accumulate) {
  RopeGeometry g;
  g.accumulate = accumulate;
  g.doc_start = doc_start;
  g.rows = B * T_;
  g.T = T_;
  g.hd = hd;
  g.half = hd / 2;
  g.pairs = (NH + int64_t{NKV}) * g.half;
  g.v_cols = int64_t{NKV} * hd;
  g.v_work = out == in && !accumulate ? 0 : g.v_cols;
  g.W = (NH + 2 * int64_t{NKV}) * hd;
  g.log_theta = std::log(static_cast<double>(theta));
  return g;
}

template <bool kBackward>
void launch(DType dt, void* out, const void* in, const RopeGeometry& g, const char* name) {
  const int64_t n = g.rows * (g.pairs + g.v_work);
  if (n <= 0) return;
  by_dtype(dt, name, [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(n, kThreads), kThreads, 0, rope_kernel<T, kBackward>)
    (static_cast<T*>(out), static_cast<const T*>(in), g);
  });
  check_launch(name);
}

}  // namespace

void rope_forward(DType dt, void* out, const void* in, int64_t B, int64_t T_, int NH, int NKV,
                  int64_t hd, float theta, const int32_t* doc_start) {
  launch<false>(dt, out, in, geometry(out, in, B, T_, NH, NKV, hd, theta, doc_start, false),
                "rope");
}

void rope_backward(DType dt, void* din, const void* dout, int64_t B, int64_t T_, int NH, int NKV,
                   int64_t hd, float theta, const int32_t* doc_start, bool accumulate) {
  launch<true>(dt, din, dout, geometry(din, dout, B, T_, NH, NKV, hd, theta, doc_start, accumulate),
               "rope_backward");
}

}  // namespace trainrun::cuda
