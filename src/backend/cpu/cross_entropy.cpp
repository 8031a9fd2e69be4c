// Fused softmax cross-entropy. The forward never materialises probabilities: per row it takes
// the max (for stability), lse = max + log sum exp(x - max), and loss = lse - x[target]; lse is
// saved. The backward recomputes softmax as exp(x - lse) and overwrites dlogits in place, reading
// each logit before writing the same index, so dlogits may alias logits and a [N,V] logits
// buffer is never doubled. Rows run in parallel.
#include <cmath>

#include "kernels.h"
#include "trainrun/core/no_id.h"
#include "vec_math.h"

namespace trainrun::cpu {

template <class T>
void cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, int64_t N,
                           int64_t V) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)  // a plain loop is a chain of dependent compares
    for (int64_t v = 0; v < V; ++v) mx = x[v] > mx ? x[v] : mx;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += exp_vec(x[v] - mx);
    const T l = mx + std::log(sum);
    lse[n] = l;
    losses[n] = targets[n] == kNoId ? l : l - x[targets[n]];
  }
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                            int64_t N, int64_t V, T scale) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    T* d = dlogits + n * V;
    const T l = lse[n];
    const int64_t tgt = targets[n];
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) d[v] = (exp_vec(x[v] - l) - (v == tgt ? T(1) : T(0))) * scale;
  }
}

template void cross_entropy_forward<float>(float*, float*, const float*, const int32_t*, int64_t,
                                           int64_t);
template void cross_entropy_forward<double>(double*, double*, const double*, const int32_t*,
                                            int64_t, int64_t);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                            int64_t, int64_t, float);
template void cross_entropy_backward<double>(double*, const double*, const double*, const int32_t*,
                                             int64_t, int64_t, double);

}  // namespace trainrun::cpu
