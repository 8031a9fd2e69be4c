// The tensor-core fragment operations of kernels/mma.cuh on the CPU-executed device: warp
// collectives that gather the 32 lanes' registers and compute what the hardware computes, from
// the PTX ISA's documented lane-to-element layouts (the table at the top of kernels/mma.cuh).
// A kernel that places an element in the wrong lane or register gets a wrong product here, as it
// would on a GPU; the sim's own tests (kernels/sim/tests/test_sim_device.cpp) pin the layouts.
//
// Included by kernels/mma.cuh only, so it is compiled into the kernels' translation units: the
// shared-memory reads of ldmatrix are the calling thread's reads, watched by the race and
// initialisation checkers like any other.
#pragma once

#include <cstdint>
#include <string>

#include "cuda_bf16.h"
#include "sim_device.h"

namespace trainrun::sim {

[[noreturn]] void fail(const std::string& message);  // scheduler.cpp: ends the launch

inline float bf16_half(uint32_t reg, int hi) {
  return trainrun::bf16_to_f32(static_cast<uint16_t>(hi ? reg >> 16 : reg & 0xffffu));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, d. The products of two bf16 are
// exact in f32; they are added in k order (the hardware's order and intermediate rounding are
// unspecified: the gpu suite's bf16 tolerances cover the difference).
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  constexpr unsigned kAll = 0xffffffffu;
  uint32_t A[32][4], B[32][2];
  const uint64_t* s = warp_collective(kAll, a[0] | uint64_t{a[1]} << 32, "mma.sync");
  for (int l = 0; l < 32; ++l) {
    A[l][0] = static_cast<uint32_t>(s[l]);
    A[l][1] = static_cast<uint32_t>(s[l] >> 32);
  }
  s = warp_collective(kAll, a[2] | uint64_t{a[3]} << 32, "mma.sync");
  for (int l = 0; l < 32; ++l) {
    A[l][2] = static_cast<uint32_t>(s[l]);
    A[l][3] = static_cast<uint32_t>(s[l] >> 32);
  }
  s = warp_collective(kAll, b[0] | uint64_t{b[1]} << 32, "mma.sync");
  for (int l = 0; l < 32; ++l) {
    B[l][0] = static_cast<uint32_t>(s[l]);
    B[l][1] = static_cast<uint32_t>(s[l] >> 32);
  }
  const unsigned lane = lane_id(), g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int r = e / 2;  // row g (r = 0) or g + 8 (r = 1)
    const unsigned col = 2 * t + e % 2;
    float acc = d[e];
    for (int kh = 0; kh < 2; ++kh)         // k = 8 kh + 2 tp + j
      for (unsigned tp = 0; tp < 4; ++tp)  // A row g(+8) lives in lanes 4g .. 4g+3,
        for (int j = 0; j < 2; ++j)        // B column n in lanes 4n .. 4n+3
          acc += bf16_half(A[4 * g + tp][r + 2 * kh], j) * bf16_half(B[4 * col + tp][kh], j);
    d[e] = acc;
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l's `row` addresses row l % 8 of matrix
// l / 8; register i receives matrix i's [g][2t..2t+1], or with .trans [2t..2t+1][g].
inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row, bool trans) {
  const char* what = trans ? "ldmatrix.trans" : "ldmatrix";
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    fail(std::string(what) + ": a row address that is not 16-byte aligned (the GPU faults with " +
         "misaligned address)");
  const uint64_t* s = warp_collective(0xffffffffu, to_bits(row), what);
  const __nv_bfloat16* rows[32];
  for (int l = 0; l < 32; ++l) rows[l] = from_bits<const __nv_bfloat16*>(s[l]);
  const unsigned lane = lane_id(), g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat16 lo = trans ? rows[8 * i + 2 * t][g] : rows[8 * i + g][2 * t];
    const __nv_bfloat16 hi = trans ? rows[8 * i + 2 * t + 1][g] : rows[8 * i + g][2 * t + 1];
    r[i] = uint32_t{lo.__x} | uint32_t{hi.__x} << 16;
  }
}

}  // namespace trainrun::sim
