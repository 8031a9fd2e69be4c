// Fused softmax cross-entropy over the vocabulary, fp32 arithmetic whatever the logits' type.
// One block (256 threads) per row. Forward: each thread keeps an online (max, sum of exp(x -
// max)) over its strided columns; the pairs merge across the warp and then the block, giving
// lse = max + log(sum) in one read of the row; loss = lse - x[target]. The backward recomputes
// softmax as exp(x - lse) and overwrites dlogits = (softmax - onehot) * scale; each element is
// read before the same thread writes it, so dlogits may alias logits (no second [N,V] buffer).
// A target outside [0, V) yields a NaN loss (and a NaN row backward) rather than a wild read, and
// its row is flagged (launch.h) so the backend raises the same DataError as the CPU.
#include <cmath>

#include "common.cuh"
#include "launch.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

// Merge two (max, sum) pairs. A side that saw no element has m = -inf, s = 0 and must not turn
// the result into NaN through exp(-inf - -inf).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float mx = fmaxf(m, m2);
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

template <class T, class S>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_forward_kernel(S* losses, S* lse, const T* logits, const int32_t* targets,
                                 int64_t V, unsigned long long* bad_id) {
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  const int64_t n = blockIdx.x;
  const T* x = logits + n * V;
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float xv = to_f32(x[v]);
    if (xv > m) {
      s = (m == -INFINITY ? 0.0f : s * expf(m - xv)) + 1.0f;
      m = xv;
    } else {
      s += expf(xv - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge(m, s, m2, s2);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sm[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float M = sm[0], Ssum = ss[0];
    for (int w = 1; w < kThreads / 32; ++w) merge(M, Ssum, sm[w], ss[w]);
    const float l = M + logf(Ssum);
    const int64_t tgt = targets[n];
    const bool ok = tgt >= 0 && tgt < V;
    if (!ok) flag_bad_id(bad_id, n, tgt);
    lse[n] = from_f32<S>(l);
    losses[n] = from_f32<S>(ok ? l - to_f32(x[tgt]) : NAN);
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(T* dlogits, const T* logits, const S* lse, const int32_t* targets,
                                  int64_t V, float scale, unsigned long long* bad_id) {
  const int64_t n = blockIdx.x;
  const T* x = logits + n * V;
  T* d = dlogits + n * V;
  const float l = to_f32(lse[n]);
  const int64_t tgt = targets[n];
  const bool ok = tgt >= 0 && tgt < V;
  if (!ok && threadIdx.x == 0) flag_bad_id(bad_id, n, tgt);
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float p = expf(to_f32(x[v]) - l);
    d[v] = from_f32<T>(ok ? (p - (v == tgt ? 1.0f : 0.0f)) * scale : NAN);
  }
}

}  // namespace

void cross_entropy_forward(DType dt, DType st, void* losses, void* lse, const void* logits,
                           const int32_t* targets, int64_t N, int64_t V,
                           unsigned long long* bad_id) {
  if (N <= 0) return;
  by_dtypes(dt, st, "cross_entropy", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    TRAINRUN_LAUNCH(static_cast<unsigned>(N), kThreads, 0, cross_entropy_forward_kernel<T, S>)
    (static_cast<S*>(losses), static_cast<S*>(lse), static_cast<const T*>(logits), targets, V,
     bad_id);
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_backward(DType dt, DType st, void* dlogits, const void* logits, const void* lse,
                            const int32_t* targets, int64_t N, int64_t V, float scale,
                            unsigned long long* bad_id) {
  if (N <= 0) return;
  by_dtypes(dt, st, "cross_entropy_backward", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    TRAINRUN_LAUNCH(static_cast<unsigned>(N), kThreads, 0, cross_entropy_backward_kernel<T, S>)
    (static_cast<T*>(dlogits), static_cast<const T*>(logits), static_cast<const S*>(lse), targets,
     V, scale, bad_id);
  });
  check_launch("cross_entropy_backward");
}

}  // namespace trainrun::cuda
