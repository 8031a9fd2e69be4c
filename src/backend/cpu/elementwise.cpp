// Flat elementwise ops over contiguous memory, split across OpenMP threads. `add` reads both
// inputs before writing each element, so out may alias a or b.
#include "kernels.h"

namespace trainrun::cpu {

template <class T>
void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void accumulate(T* dst, const T* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

template <class T>
void scale(T* x, T s, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

template <class T>
void fill(T* x, T value, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

template void add<float>(float*, const float*, const float*, int64_t);
template void add<double>(double*, const double*, const double*, int64_t);
template void accumulate<float>(float*, const float*, int64_t);
template void accumulate<double>(double*, const double*, int64_t);
template void scale<float>(float*, float, int64_t);
template void scale<double>(double*, double, int64_t);
template void fill<float>(float*, float, int64_t);
template void fill<double>(double*, double, int64_t);
template void fill<int32_t>(int32_t*, int32_t, int64_t);
template void fill<uint16_t>(uint16_t*, uint16_t, int64_t);

}  // namespace trainrun::cpu
