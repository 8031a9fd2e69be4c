// Tensor-core fragments for the bf16 kernels: the one wrapper through which a kernel touches
// tensor cores. A warp computes D = A B + D on 16x8x16 tiles (mma.sync.m16n8k16, bf16 inputs, f32
// accumulation) and loads its operands from shared memory with ldmatrix. The fragments follow
// the PTX ISA's documented lane-to-element layouts ("Matrix fragments for mma.m16n8k16 with
// floating point type", "Warp-level matrix load instruction: ldmatrix"); with
// g = lane / 4 and t = lane % 4:
//
//   FragA (16x16, row-major): x[0] = A[g][2t..2t+1]   x[1] = A[g+8][2t..2t+1]
//                             x[2] = A[g][2t+8..+9]   x[3] = A[g+8][2t+8..+9]
//   FragB (16x8, k x n):      x[0] = B[2t..2t+1][g]   x[1] = B[2t+8..2t+9][g]
//   FragC (16x8, f32):        x[0..1] = C[g][2t..2t+1]    x[2..3] = C[g+8][2t..2t+1]
//
// Each 32-bit register holds two bf16, the lower-indexed element in the low half.
//
// Under nvcc these are inline PTX (sm_80 and later). Under the CPU-executed device
// (kernels/sim/include/sim_mma.h) they are warp collectives that gather the 32 lanes' registers
// and compute from the same layouts, so the sim runs the very kernel code a GPU runs and a kernel
// that puts an element in the wrong register fails the gpu suite there.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "pack.cuh"

#if !defined(__CUDACC__)
#include <sim_mma.h>
#endif

namespace trainrun::cuda {

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
};

// Two floats rounded to bf16 (nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16;
}

// d += a b for the warp's 16x8 tile.
__device__ __forceinline__ void mma_bf16(FragC& d, const FragA& a, const FragB& b) {
#if defined(__CUDACC__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d.x[0]), "+f"(d.x[1]), "+f"(d.x[2]), "+f"(d.x[3])
      : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]), "r"(b.x[1]));
#else
  sim::mma_m16n8k16_bf16(d.x, a.x, b.x);
#endif
}

// ldmatrix .x4: four 8x8 bf16 matrices from shared memory. Lane l gives `row`, the address of
// row l % 8 of matrix l / 8 (16 bytes, 16-byte aligned); register i of every lane receives matrix
// i's elements [g][2t..2t+1]. The .trans form delivers each matrix transposed: [2t..2t+1][g].
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
#if defined(__CUDACC__)
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#else
  sim::ldmatrix_x4(r, row, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* row) {
#if defined(__CUDACC__)
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#else
  sim::ldmatrix_x4(r, row, true);
#endif
}

// 16 bytes (8 bf16) from src to dst, both 16-byte aligned: one vector load and store on a GPU.
__device__ __forceinline__ void copy16(bf16* dst, const bf16* src) {
  store_vec<8>(dst, load_vec<8>(src));
}

}  // namespace trainrun::cuda
