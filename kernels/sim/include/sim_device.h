// The CUDA kernel language on the CPU, for trainrun's CPU-executed device (libtrainrun_cudasim.so):
// the same kernel sources that nvcc compiles are compiled by the host C++ compiler against this
// header. Included (through the stand-in <cuda_runtime.h>) instead of the toolkit's headers.
//
// Execution model (kernels/sim/scheduler.cpp): a launch runs its blocks one after another on the
// calling host thread; the threads of a block are cooperative fibers that really interleave at
// __syncthreads and at every warp collective (shuffles, votes, __syncwarp), which exchange values
// between 32-lane warps exactly as the hardware's lane rules say. A thread runs uninterrupted
// between two such points, so a kernel that is correct only because of some scheduling order
// of the GPU's is not proved by this (docs/cuda.md).
//
// Why fibers, not one OS thread per GPU thread: a 1024-thread block would need 1024 OS threads
// meeting at every barrier and 32 at every shuffle, each meeting a round of futex wake-ups on two
// cores; a fiber switch is a few nanoseconds and the order is deterministic, so a failure
// reproduces. The race detector does not need real parallelism: it watches every shared-memory
// access (kernels/sim/racecheck.cpp), which finds a missing barrier whatever the order.
#pragma once

#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// The built-in coordinates of the thread that is running (set by the scheduler at every switch).
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
constexpr int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static shared memory: one instance per kernel (blocks run one at a time, so each block has it
// to itself). Under the race checker a thread_local: the kernels are templates, and GCC drops a
// section attribute on a template's static locals (GCC bug 88061), but every thread_local of the
// plugin lives in its TLS block, whose bounds the checker can read (racecheck.cpp). Under
// AddressSanitizer plain statics, which get red zones, so an index past a shared array is caught.
#if defined(TRAINRUN_SIM_RACECHECK)
#define __shared__ static thread_local
#else
#define __shared__ static
#endif

namespace trainrun::sim {

// ---- launches ----
struct LaunchConfig {
  const char* name;    // the kernel expression as written at the launch
  const void* kernel;  // its address: the key of cudaFuncSetAttribute
  dim3 grid, block;
  size_t dynamic_shared;
};
// Runs body(arg) as every thread of every block. Checks the limits an H200 enforces first; a
// launch that breaks one runs nothing and sets the error cudaGetLastError returns, as on a GPU.
void run_grid(const LaunchConfig& cfg, void (*body)(void*), void* arg);

template <class... P>
class Launch {
 public:
  Launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0)
      : kernel_(kernel), cfg_{name, reinterpret_cast<const void*>(kernel), grid, block, smem} {}

  // Arguments convert to the kernel's parameter types once, on the host, as at a real launch.
  template <class... A>
  void operator()(A&&... args) const {
    struct Call {
      void (*kernel)(P...);
      std::tuple<std::decay_t<P>...> params;
    } call{kernel_, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
    run_grid(
        cfg_,
        [](void* p) {
          Call* c = static_cast<Call*>(p);
          std::apply(c->kernel, c->params);  // each thread gets its own copies (by value)
        },
        &call);
  }

 private:
  void (*kernel_)(P...);
  LaunchConfig cfg_;
};

// The launch's dynamic (extern) shared memory: its own heap block of exactly the launch's size.
void* dynamic_shared();

// ---- block and warp synchronisation ----
void syncthreads();
// Every lane of `mask` (which must hold the caller) reaches a warp collective with the same mask,
// each contributing `bits`; returns the 32 contributions (only the mask's lanes are defined).
const uint64_t* warp_collective(unsigned mask, uint64_t bits, const char* what);
// The value lane `src` gave; a lane outside the mask is an error (the GPU leaves it undefined).
uint64_t lane_value(const uint64_t* slots, unsigned mask, unsigned src, const char* what);
unsigned lane_id();

// A vector access (kernels/pack.cuh) of `bytes` bytes at p: a GPU needs p aligned to the access's
// size and faults with "misaligned address" otherwise; so does this, ending the launch.
void check_vector_access(const void* p, size_t bytes);

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a large type");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace trainrun::sim

#define TRAINRUN_LAUNCH(grid, block, smem, ...) \
  ::trainrun::sim::Launch(#__VA_ARGS__, __VA_ARGS__, grid, block, smem)
#define TRAINRUN_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::trainrun::sim::dynamic_shared())

inline void __syncthreads() {
  trainrun::sim::syncthreads();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  trainrun::sim::warp_collective(mask, 0, "__syncwarp");
}

// Shuffles with the hardware's lane rules, including `width` segments.
template <class T>
T __shfl_sync(unsigned mask, T var, int src, int width = warpSize) {
  namespace s = trainrun::sim;
  const unsigned lane = s::lane_id(), w = static_cast<unsigned>(width);
  const uint64_t* v = s::warp_collective(mask, s::to_bits(var), "__shfl_sync");
  const unsigned from = (lane & ~(w - 1)) + (static_cast<unsigned>(src) & (w - 1));
  return s::from_bits<T>(s::lane_value(v, mask, from, "__shfl_sync"));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  namespace s = trainrun::sim;
  const unsigned lane = s::lane_id(), w = static_cast<unsigned>(width);
  const uint64_t* v = s::warp_collective(mask, s::to_bits(var), "__shfl_xor_sync");
  unsigned from = lane ^ static_cast<unsigned>(lane_mask);
  if (from >= (lane & ~(w - 1)) + w) from = lane;  // a later segment: own value
  return s::from_bits<T>(s::lane_value(v, mask, from, "__shfl_xor_sync"));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  namespace s = trainrun::sim;
  const unsigned lane = s::lane_id(), w = static_cast<unsigned>(width);
  const uint64_t* v = s::warp_collective(mask, s::to_bits(var), "__shfl_down_sync");
  const unsigned from = (lane & (w - 1)) + delta >= w ? lane : lane + delta;
  return s::from_bits<T>(s::lane_value(v, mask, from, "__shfl_down_sync"));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  namespace s = trainrun::sim;
  const unsigned lane = s::lane_id(), w = static_cast<unsigned>(width);
  const uint64_t* v = s::warp_collective(mask, s::to_bits(var), "__shfl_up_sync");
  const unsigned from = (lane & (w - 1)) < delta ? lane : lane - delta;
  return s::from_bits<T>(s::lane_value(v, mask, from, "__shfl_up_sync"));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  namespace s = trainrun::sim;
  const uint64_t* v = s::warp_collective(mask, predicate != 0, "__ballot_sync");
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && v[l]) r |= 1u << l;
  return r;
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == mask;
}

// ---- atomics: one read-modify-write each (threads switch only at barriers and collectives, and
// launches are serialised, so a plain update is atomic). Out of line, so the race checker, which
// watches plain accesses only, does not count them as races, as compute-sanitizer does not. ----
float atomicAdd(float* address, float val);
double atomicAdd(double* address, double val);
int atomicAdd(int* address, int val);
unsigned atomicAdd(unsigned* address, unsigned val);
unsigned long long atomicAdd(unsigned long long* address, unsigned long long val);
int atomicMin(int* address, int val);
unsigned long long atomicMin(unsigned long long* address, unsigned long long val);
int atomicMax(int* address, int val);
unsigned long long atomicMax(unsigned long long* address, unsigned long long val);
int atomicCAS(int* address, int compare, int val);
unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare,
                             unsigned long long val);
float atomicExch(float* address, float val);

// ---- math: the C library's correctly rounded functions stand for the device's (which are within
// 1-2 ulp); the fast intrinsics map to the same (docs/cuda.md: what the sim cannot show) ----
inline float __expf(float x) {
  return expf(x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline unsigned __float_as_uint(float x) {
  return trainrun::sim::from_bits<unsigned>(trainrun::sim::to_bits(x));
}
inline float __uint_as_float(unsigned x) {
  return trainrun::sim::from_bits<float>(trainrun::sim::to_bits(x));
}
