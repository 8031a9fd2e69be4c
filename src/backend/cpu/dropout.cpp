// Inverted dropout whose mask is a pure function of (seed, element index): no mask tensor is
// stored, the backward recomputes it, a resumed run draws the same masks, and any device can
// reproduce it. The hash is splitmix64's finaliser applied twice:
//   key = mix(seed);  u = mix(key + (index + 1) * 0x9E3779B97F4A7C15)
//   keep  iff  (u >> 40) >= floor(p * 2^24)          (a 24-bit uniform against a threshold)
// Mixing the seed first keeps streams for nearby seeds unrelated. p == 0 is an exact copy.
#include <cstring>

#include "kernels.h"
#include "trainrun/rng.h"

namespace trainrun::cpu {

namespace {

inline uint32_t threshold(float p) {
  return static_cast<uint32_t>(double(p) * 16777216.0);
}

inline bool keeps(uint64_t key, uint64_t index, uint32_t thresh) {
  return static_cast<uint32_t>(mix64(key + (index + 1) * kGoldenGamma) >> 40) >= thresh;
}
}  // namespace

bool dropout_keeps(uint64_t seed, uint64_t index, float p) {
  return keeps(mix64(seed), index, threshold(p));
}

template <class T>
void dropout_forward(T* out, const T* in, int64_t n, float p, uint64_t seed) {
  if (p == 0.0f) {
    if (out != in) std::memmove(out, in, sizeof(T) * n);
    return;
  }
  const uint64_t key = mix64(seed);
  const uint32_t thresh = threshold(p);
  const T s = static_cast<T>(1.0 / (1.0 - double(p)));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = keeps(key, i, thresh) ? in[i] * s : T(0);
}

template <class T>
void dropout_backward(T* din, const T* dout, int64_t n, float p, uint64_t seed) {
  const uint64_t key = mix64(seed);
  const uint32_t thresh = threshold(p);
  const T s = static_cast<T>(1.0 / (1.0 - double(p)));
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    if (keeps(key, i, thresh)) din[i] += dout[i] * s;
}

template void dropout_forward<float>(float*, const float*, int64_t, float, uint64_t);
template void dropout_forward<double>(double*, const double*, int64_t, float, uint64_t);
template void dropout_backward<float>(float*, const float*, int64_t, float, uint64_t);
template void dropout_backward<double>(double*, const double*, int64_t, float, uint64_t);

}  // namespace trainrun::cpu
