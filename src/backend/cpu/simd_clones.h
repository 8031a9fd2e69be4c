// Compute-bound f32 loops (GELU's tanh, the attention softmax's exp) compiled twice: for AVX-512
// (x86-64-v4) and for the build's target (meson option march, x86-64-v3 by default), the loader
// choosing by the CPU it runs on (GCC function multiversioning, an ifunc). The build must run on
// AVX2-only machines, yet on AVX-512 ones 16 lanes ran GELU's forward 1.9x and its backward 1.4x
// faster (bench/RESULTS.md section 17). Memory-bound loops gain nothing from it and stay single.
//
// Only plain (non-template) functions take the attribute, and an OpenMP region is outlined before
// cloning, so a clone holds the loop of one thread's span: the caller splits the work with
// for_each_thread_span().
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TRAINRUN_AVX512_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define TRAINRUN_AVX512_CLONES
#endif

namespace trainrun::cpu {

// f(begin, end) once per OpenMP thread over contiguous spans of [0, n), split at multiples of
// 16 elements so no two threads write one cache line.
template <class F>
void for_each_thread_span(int64_t n, F&& f) {
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) f(begin, end);
  }
}

}  // namespace trainrun::cpu
