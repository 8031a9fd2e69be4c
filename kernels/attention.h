// What attention.cu (the entry points and the CUDA-core kernels) and attention_tc.cu (the
// tensor-core kernels for bf16) share: the geometry of the qkv layout and the tensor-core path's
// entry points, and the document-masking helper of their kernels. attention.cu chooses the path;
// launch.h is the backend's view of both.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "cuda_check.h"
#include "trainrun/core/documents.h"
#include "trainrun/core/tensor.h"

namespace trainrun::cuda {

// qkv [B,T,W], W = (NH + 2*NKV)*hd = (q | k | v); out [B,T,C], C = NH*hd (launch.h).
struct AttentionGeometry {
  int64_t T, C, W;                     // sequence length, out width NH*hd, qkv row width
  int64_t k_col, v_col;                // first column of k head 0 and of v head 0 in a qkv row
  int NH, NKV, group, hd;              // group = NH / NKV q heads per kv head
  float scale;                         // 1 / sqrt(hd)
  int64_t B = 0;                       // batch: blocks past B x heads return (grid_over)
  const int32_t* doc_start = nullptr;  // [B,T] document starts (documents.h); nullptr: none
  bool accumulate = true;              // backward: dqkv += (else =, dqkv never read)
};

// What a backward result at *p is added to before it is stored there: *p when accumulating, else
// 0 without reading *p (an overwritten gradient is never read: the point of overwriting).
template <class T>
__device__ __forceinline__ float grad_base(const AttentionGeometry& g, const T* p) {
  return g.accumulate ? to_f32(*p) : 0.0f;
}

// The kernels' grids run over (tiles of the sequence, B x heads). B x heads may pass grid.y's
// limit of 65,535 (a micro-batch of 2048 sequences at 32 heads does): it is folded into grid.y x
// grid.z, a block takes its row of B x heads from grid_row(), and the blocks of the last z layer
// past the count return before touching anything.
inline dim3 grid_over(unsigned tiles, int64_t rows) {
  // The device's limit: 65,535 on every GPU (the sim can lower it for a test). An attribute
  // query costs about a microsecond.
  int device = 0, max_y = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&max_y, cudaDevAttrMaxGridDimY, device),
             "cudaDeviceGetAttribute (max grid y)");
  const int64_t y = rows < max_y ? rows : max_y;
  return dim3(tiles, static_cast<unsigned>(y), static_cast<unsigned>((rows + y - 1) / y));
}
__device__ __forceinline__ int64_t grid_row() {
  return int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
}

constexpr int kNoKey = 0x7fffffff;  // a first key above every key: a row past T sees none

// The first key query t sees (documents.h) as a 32-bit int (doc_start is i32, so T < 2^31);
// kNoKey for rows past T.
__device__ __forceinline__ int row_first_key(const AttentionGeometry& g, int64_t b, int64_t t) {
  return t < g.T ? static_cast<int>(first_key(g.doc_start, b, g.T, t)) : kNoKey;
}

// attention_tc.cu: bf16 activations with head_dim 32, 64 or 128.
bool attention_tc_supports(DType dt, int64_t hd);
void attention_tc_forward(DType st, void* out, void* lse, const void* qkv, int64_t B,
                          const AttentionGeometry& g);
// D [B,NH,T] = rowsum(dout * out), computed by attention.cu's delta kernel.
void attention_tc_backward(DType st, void* dqkv, const void* dout, const void* qkv, const void* lse,
                           const float* D, int64_t B, const AttentionGeometry& g);

}  // namespace trainrun::cuda
