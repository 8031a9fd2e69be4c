// 16-byte vector access for the memory-bound kernels (llm.c's Packed128). A thread that reads a
// bf16 tensor one element at a time issues eight 2-byte loads where one 16-byte load
// (ld.global.v4) carries the same bytes: a warp's request becomes 512 contiguous bytes, an eighth
// of the memory instructions, and more bytes in flight per thread, which is what keeps HBM busy.
//
// A kernel is written once over Vec<T, W>, W elements per access: W = kPack<T> (4 f32 or 8 bf16)
// when every pointer it touches is 16-byte aligned and its length (a row, or n) is a multiple of
// W (packable), else W = 1, the same code an element at a time. The host picks W per launch
// (by_pack) and both forms are compiled. Tensors are views at any element offset (a bias inside
// the packed parameter buffer, a slice, a row of width 57), so the narrow form is needed, not a
// fallback that never runs; the gpu suite runs both (docs/cuda.md).
//
// A kernel's summation order within a thread follows its elements, so the two forms of one
// reduction may differ in the last bits; kernels that must agree bit for bit with another
// (the fused classifier and the forward, a fused residual norm and add + norm) pick W from the
// same pointers and lengths.
//
// On the CPU-executed device a wide access first checks the alignment a GPU requires
// (sim_device.h's check_vector_access) and fails the launch as the GPU's "misaligned address"
// would, so a kernel that vectorises a misaligned view fails in CI.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "common.cuh"

namespace trainrun::cuda {

// Elements of T in 16 bytes.
template <class T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));

// W elements of T, aligned to their size, so a load or store of one is one vector access.
template <class T, int W>
struct alignas(sizeof(T) * W) Vec {
  T v[W];
  __device__ __forceinline__ T& operator[](int k) { return v[k]; }
  __device__ __forceinline__ const T& operator[](int k) const { return v[k]; }
};

template <int W, class T>
__device__ __forceinline__ Vec<T, W> load_vec(const T* p) {
#if defined(__CUDACC__)
  return *reinterpret_cast<const Vec<T, W>*>(p);
#else
  if (W > 1) sim::check_vector_access(p, sizeof(T) * W);
  Vec<T, W> r;
  for (int k = 0; k < W; ++k) r.v[k] = p[k];
  return r;
#endif
}

template <int W, class T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, W>& x) {
#if defined(__CUDACC__)
  *reinterpret_cast<Vec<T, W>*>(p) = x;
#else
  if (W > 1) sim::check_vector_access(p, sizeof(T) * W);
  for (int k = 0; k < W; ++k) p[k] = x.v[k];
#endif
}

// store_grad (common.cuh) for W consecutive gradients: dst's pack plus g (accumulate), or g over
// it with dst never read.
template <int W, class T>
__device__ __forceinline__ void store_grads(T* dst, const float (&g)[W], bool accumulate) {
  Vec<T, W> r;
  if (accumulate) r = load_vec<W>(dst);
  for (int k = 0; k < W; ++k) r[k] = from_f32<T>(accumulate ? to_f32(r[k]) + g[k] : g[k]);
  store_vec<W>(dst, r);
}

// A grid-stride loop over the n / W packs of n elements (n a multiple of W): f(i), i the first
// element of each pack.
template <int W, class F>
__device__ __forceinline__ void for_each_pack(int64_t n, const F& f) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * W;
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * W; i < n; i += stride) f(i);
}

// A warp's loop over a row of C elements (C a multiple of W): f(c) for lane's packs, c = the
// first element of packs lane, lane + 32, ... (lane reads 16 contiguous bytes, the warp 512).
template <int W, class F>
__device__ __forceinline__ void for_lane_packs(int64_t C, int lane, const F& f) {
  for (int64_t c = int64_t(lane) * W; c < C; c += 32 * W) f(c);
}

// Whether a kernel may access n elements (or rows of n) W at a time through these pointers:
// n a multiple of W and every pointer 16-byte aligned (null, an absent tensor, is). 16 bytes is
// what the widest access needs; a narrower type's W-element access needs less, so this is safe.
template <int W>
bool packable(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % W != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Calls f(std::integral_constant<int, W>{}) when packed, else with 1: the launch's access width.
template <int W, class F>
void by_pack(bool packed, F&& f) {
  if (packed)
    f(std::integral_constant<int, W>{});
  else
    f(std::integral_constant<int, 1>{});
}

// by_pack for a grid-stride kernel over n elements (for_each_pack): launch(w, grid) with the
// grid for n / W packs of `threads`-thread blocks.
template <int W, class Launch>
void launch_packed(int64_t n, bool packed, int threads, const Launch& launch) {
  by_pack<W>(packed, [&](auto w) { launch(w, grid_for(n / decltype(w)::value, threads)); });
}

}  // namespace trainrun::cuda
