// Embedding lookup and its gradient.
// Forward: one thread per output element (row n, column c), coalesced along c. An id outside
// [0, V) writes a NaN row instead of reading out of bounds, and its position is flagged
// (launch.h) so the backend raises the same DataError as the CPU. kNoId (another
// vocabulary-parallel rank's id, core/no_id.h) is a zero row, and adds nothing in backward.
// Backward: dtable[ids[n], c] += dout[n, c] with fp32 atomicAdd into an f32 table gradient (dout
// f32, or bf16 under mixed precision). Rows that share a
// token add in an unspecified order, so the result can differ in the last bits from run to run
// (everything else in this plugin is deterministic). A sort-by-token pass would fix that; it is
// not worth it for a gradient that is summed over thousands of rows anyway.
#include <cmath>

#include "common.cuh"
#include "launch.h"
#include "trainrun/core/no_id.h"

namespace trainrun::cuda {
namespace {

constexpr int kThreads = 256;

// True when id is a row of the table; otherwise (unless it is kNoId) the row's first column
// flags position n.
__device__ __forceinline__ bool valid_id(int64_t id, int64_t V, int64_t n, int64_t c,
                                         unsigned long long* bad_id) {
  if (id >= 0 && id < V) return true;
  if (id == kNoId) return false;
  if (c == 0) flag_bad_id(bad_id, n, id);
  return false;
}

template <class T>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t N,
                                         int64_t C, int64_t V, unsigned long long* bad_id) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    out[i] =
        valid_id(id, V, n, c, bad_id) ? table[id * C + c] : from_f32<T>(id == kNoId ? 0.0f : NAN);
  }
}

template <class T>
__global__ void embedding_backward_kernel(float* dtable, const T* dout, const int32_t* ids,
                                          int64_t N, int64_t C, int64_t V,
                                          unsigned long long* bad_id) {
  const int64_t total = N * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    const int64_t id = ids[n];
    if (valid_id(id, V, n, c, bad_id)) atomicAdd(dtable + id * C + c, to_f32(dout[i]));
  }
}

}  // namespace

void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N,
                       int64_t C, int64_t V, unsigned long long* bad_id) {
  if (N <= 0 || C <= 0) return;
  by_dtype(dt, "embedding", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(N * C, kThreads), kThreads, 0, embedding_forward_kernel<T>)
    (static_cast<T*>(out), ids, static_cast<const T*>(table), N, C, V, bad_id);
  });
  check_launch("embedding_forward");
}

void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N,
                        int64_t C, int64_t V, unsigned long long* bad_id) {
  if (N <= 0 || C <= 0) return;
  by_dtype(dt, "embedding_backward", [&](auto t) {
    using T = decltype(t);
    TRAINRUN_LAUNCH(grid_for(N * C, kThreads), kThreads, 0, embedding_backward_kernel<T>)
    (static_cast<float*>(dtable), static_cast<const T*>(dout), ids, N, C, V, bad_id);
  });
  check_launch("embedding_backward");
}

}  // namespace trainrun::cuda
