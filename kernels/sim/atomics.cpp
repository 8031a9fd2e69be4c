// Device atomics of trainrun's CPU-executed device. Threads switch only at barriers and warp
// collectives and launches run one at a time, so a plain read-modify-write is atomic. Kept out
// of the kernels' translation units so the race checker, which instruments those, sees no plain
// access here: compute-sanitizer does not count atomics as races either.
#include "cuda_runtime.h"

namespace {

template <class T, class F>
T update(T* address, F f) {
  const T old = *address;
  *address = f(old);
  return old;
}

}  // namespace

float atomicAdd(float* a, float v) {
  return update(a, [v](float o) { return o + v; });
}
double atomicAdd(double* a, double v) {
  return update(a, [v](double o) { return o + v; });
}
int atomicAdd(int* a, int v) {
  // Two's-complement wrap, as the hardware does (signed overflow is undefined in C++).
  return update(a, [v](int o) {
    return static_cast<int>(static_cast<unsigned>(o) + static_cast<unsigned>(v));
  });
}
unsigned atomicAdd(unsigned* a, unsigned v) {
  return update(a, [v](unsigned o) { return o + v; });
}
unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return update(a, [v](unsigned long long o) { return o + v; });
}
int atomicMin(int* a, int v) {
  return update(a, [v](int o) { return v < o ? v : o; });
}
unsigned long long atomicMin(unsigned long long* a, unsigned long long v) {
  return update(a, [v](unsigned long long o) { return v < o ? v : o; });
}
int atomicMax(int* a, int v) {
  return update(a, [v](int o) { return v > o ? v : o; });
}
unsigned long long atomicMax(unsigned long long* a, unsigned long long v) {
  return update(a, [v](unsigned long long o) { return v > o ? v : o; });
}
int atomicCAS(int* a, int compare, int v) {
  return update(a, [=](int o) { return o == compare ? v : o; });
}
unsigned long long atomicCAS(unsigned long long* a, unsigned long long compare,
                             unsigned long long v) {
  return update(a, [=](unsigned long long o) { return o == compare ? v : o; });
}
float atomicExch(float* a, float v) {
  return update(a, [v](float) { return v; });
}
