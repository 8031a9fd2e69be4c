// bf16 storage on the host: the upper 16 bits of an f32, rounded to nearest even (the rounding
// of __float2bfloat16_rn, which the CUDA kernels use). Host code that must reproduce exactly what
// the GPU stores (the CPU bf16 reference, test inputs, fill) rounds through these.
#pragma once

#include <cstdint>
#include <cstring>

#include "trainrun/core/host_device.h"

namespace trainrun {

TRAINRUN_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TRAINRUN_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round to nearest, ties to even. NaN stays a (quiet) NaN instead of rounding into Inf.
TRAINRUN_HD inline uint16_t bf16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TRAINRUN_HD inline float bf16_to_f32(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// The f32 nearest to f that bf16 can hold: what survives a round trip through bf16 storage.
TRAINRUN_HD inline float round_to_bf16(float f) {
  return bf16_to_f32(bf16_from_f32(f));
}

}  // namespace trainrun
