// Fused softmax cross-entropy over the vocabulary, fp32 arithmetic whatever the logits' type.
// One block per row. Each thread keeps an online (max, sum of exp(x - max)) over its strided
// columns; the pairs merge across the warp and then the block, giving lse = max + log(sum) in one
// read of the row (row_lse); loss = lse - x[target]. The gradient recomputes softmax as
// exp(x - lse) and overwrites dlogits = (softmax - onehot) * scale (write_gradient); each element
// is read before the same thread writes it, so dlogits may alias logits (no second [N,V] buffer).
// Rows are read and written 16 bytes a thread at a time where V and the pointers allow it
// (pack.cuh: V = 50304 does, GPT-2's unpadded 50257 does not).
//
// Three kernels: the forward (evaluation; 1024 threads a row, as the fused one, so the two sum
// a row in the same order), the backward (256 threads: pointwise), and the fused
// classifier for training (llm.c's design): lse, the loss and the gradient in one kernel, so the
// gradient pass reads a row the block has just read. It runs 1024 threads a row, at most two rows
// an SM (about 260 rows in flight on an H100/H200: 26 MB of bf16 rows at V = 50304, inside the 50
// MB L2), so that second read comes from L2 rather than HBM: one HBM read of the logits a step
// instead of two, and the forward's lse round trip gone. Its results are those of the two
// kernels bit for bit (the gradient uses lse rounded to the stats type, as the backward reads it).
//
// A target outside [0, V) yields a NaN loss (and a NaN row gradient) rather than a wild read, and
// its row is flagged (launch.h) so the backend raises the same DataError as the CPU. kNoId
// (core/no_id.h: a target another vocabulary-parallel rank holds) is no target: the loss is the
// lse and the gradient the softmax.
#include <cmath>

#include "common.cuh"
#include "launch.h"
#include "pack.cuh"
#include "trainrun/core/no_id.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;        // the backward (pointwise over the row)
constexpr int kFusedThreads = 1024;  // the fused classifier (see the top) and the forward

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

// logsumexp of the row x[0, V), returned to every thread of the NT-thread block, which reads
// the row W elements at a time (pack.cuh).
template <int NT, int W, class T>
__device__ float row_lse(const T* x, int64_t V) {
  __shared__ float sm[NT / 32], ss[NT / 32], total;
  float m = -INFINITY, s = 0.0f;
  for (int64_t v = threadIdx.x * W; v < V; v += NT * W) {
    const Vec<T, W> p = load_vec<W>(x + v);
    for (int k = 0; k < W; ++k) {
      const float xv = to_f32(p[k]);
      if (xv > m) {
        s = (m == -INFINITY ? 0.0f : s * expf(m - xv)) + 1.0f;
        m = xv;
      } else if (m != -INFINITY) {
        // Skipped while the thread has seen only -inf (masked logits): such an element adds
        // exp(-inf) = 0, and exp(-inf - -inf) would be a NaN that only the reset above (at the
        // first finite element) or merge() (which drops a side with m = -inf) keeps out.
        s += expf(xv - m);
      }
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
    for (int w = 1; w < NT / 32; ++w) merge(M, Ssum, sm[w], ss[w]);
    total = M + logf(Ssum);
  }
  __syncthreads();
  return total;
}

// Thread 0: the row's saved lse and loss (reads x[tgt]; a bad target is flagged, its loss NaN).
template <class T, class S>
__device__ void write_loss(S* losses, S* lse, const T* x, float l, int64_t n, int64_t tgt,
                           int64_t V, unsigned long long* bad_id) {
  const bool here = tgt >= 0 && tgt < V, ok = here || tgt == kNoId;
  if (!ok) flag_bad_id(bad_id, n, tgt);
  lse[n] = from_f32<S>(l);
  losses[n] = from_f32<S>(here ? l - to_f32(x[tgt]) : ok ? l : NAN);
}

// The block's threads: d[v] = (exp(x[v] - l) - onehot) * scale over the row (NaN for a bad target),
// W elements at a time; a thread reads each pack of x before it writes that pack of d.
template <int NT, int W, class T>
__device__ void write_gradient(T* d, const T* x, float l, int64_t tgt, int64_t V, float scale) {
  const bool ok = (tgt >= 0 && tgt < V) || tgt == kNoId;  // kNoId matches no column below
  for (int64_t v = threadIdx.x * W; v < V; v += NT * W) {
    Vec<T, W> r = load_vec<W>(x + v);
    for (int k = 0; k < W; ++k) {
      const float p = expf(to_f32(r[k]) - l);
      r[k] = from_f32<T>(ok ? (p - (v + k == tgt ? 1.0f : 0.0f)) * scale : NAN);
    }
    store_vec<W>(d + v, r);
  }
}

// The forward reduces a row with the fused kernel's thread count and access width (both chosen
// from the logits alone), so both sum it in the same order and give the same lse bit for bit.
template <int W, class T, class S>
__global__ void __launch_bounds__(kFusedThreads)
    cross_entropy_forward_kernel(S* losses, S* lse, const T* logits, const int32_t* targets,
                                 int64_t V, unsigned long long* bad_id) {
  const int64_t n = blockIdx.x;
  const T* x = logits + n * V;
  const float l = row_lse<kFusedThreads, W>(x, V);
  if (threadIdx.x == 0) write_loss(losses, lse, x, l, n, targets[n], V, bad_id);
}

template <int W, class T, class S>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_backward_kernel(T* dlogits, const T* logits, const S* lse, const int32_t* targets,
                                  int64_t V, float scale, unsigned long long* bad_id) {
  const int64_t n = blockIdx.x;
  const int64_t tgt = targets[n];
  if (!(tgt >= 0 && tgt < V) && tgt != kNoId && threadIdx.x == 0) flag_bad_id(bad_id, n, tgt);
  write_gradient<kThreads, W>(dlogits + n * V, logits + n * V, to_f32(lse[n]), tgt, V, scale);
}

// WL: the width the lse reads the logits at (the forward's); WG: the gradient pass's, which
// needs dlogits aligned too.
template <int WL, int WG, class T, class S>
__global__ void __launch_bounds__(kFusedThreads)
    cross_entropy_fused_kernel(S* losses, S* lse, T* dlogits, const T* logits,
                               const int32_t* targets, int64_t V, float scale,
                               unsigned long long* bad_id) {
  const int64_t n = blockIdx.x;
  const T* x = logits + n * V;
  const float l = row_lse<kFusedThreads, WL>(x, V);
  const int64_t tgt = targets[n];
  if (threadIdx.x == 0) write_loss(losses, lse, x, l, n, tgt, V, bad_id);
  __syncthreads();  // x[tgt] is read before any thread overwrites the row (dlogits may alias it)
  write_gradient<kFusedThreads, WG>(dlogits + n * V, x, to_f32(from_f32<S>(l)), tgt, V, scale);
}

}  // namespace

void cross_entropy_forward(DType dt, DType st, void* losses, void* lse, const void* logits,
                           const int32_t* targets, int64_t N, int64_t V,
                           unsigned long long* bad_id) {
  if (N <= 0) return;
  by_dtypes(dt, st, "cross_entropy", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    by_pack<kPack<T>>(packable<kPack<T>>(V, {logits}), [&](auto w) {
      TRAINRUN_LAUNCH(static_cast<unsigned>(N), kFusedThreads, 0,
                      cross_entropy_forward_kernel<decltype(w)::value, T, S>)
      (static_cast<S*>(losses), static_cast<S*>(lse), static_cast<const T*>(logits), targets, V,
       bad_id);
    });
  });
  check_launch("cross_entropy_forward");
}

void cross_entropy_fused(DType dt, DType st, void* losses, void* lse, void* dlogits,
                         const void* logits, const int32_t* targets, int64_t N, int64_t V,
                         float scale, unsigned long long* bad_id) {
  if (N <= 0) return;
  by_dtypes(dt, st, "cross_entropy_fused", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    by_pack<kPack<T>>(packable<kPack<T>>(V, {logits}), [&](auto wl) {
      // The gradient pass reads the logits too, so it is packed only where the lse is: three
      // width pairs, not four.
      constexpr int WL = decltype(wl)::value;
      by_pack<WL>(WL > 1 && packable<WL>(V, {dlogits}), [&](auto wg) {
        TRAINRUN_LAUNCH(static_cast<unsigned>(N), kFusedThreads, 0,
                        cross_entropy_fused_kernel<WL, decltype(wg)::value, T, S>)
        (static_cast<S*>(losses), static_cast<S*>(lse), static_cast<T*>(dlogits),
         static_cast<const T*>(logits), targets, V, scale, bad_id);
      });
    });
  });
  check_launch("cross_entropy_fused");
}

void cross_entropy_backward(DType dt, DType st, void* dlogits, const void* logits, const void* lse,
                            const int32_t* targets, int64_t N, int64_t V, float scale,
                            unsigned long long* bad_id) {
  if (N <= 0) return;
  by_dtypes(dt, st, "cross_entropy_backward", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    by_pack<kPack<T>>(packable<kPack<T>>(V, {logits, dlogits}), [&](auto w) {
      TRAINRUN_LAUNCH(static_cast<unsigned>(N), kThreads, 0,
                      cross_entropy_backward_kernel<decltype(w)::value, T, S>)
      (static_cast<T*>(dlogits), static_cast<const T*>(logits), static_cast<const S*>(lse), targets,
       V, scale, bad_id);
    });
  });
  check_launch("cross_entropy_backward");
}

}  // namespace trainrun::cuda
