// __nv_bfloat16 for trainrun's CPU-executed device: the storage type and the two conversions the
// kernels call, rounding exactly as the GPU does (nearest even; every NaN becomes the canonical
// 0x7FFF, as __float2bfloat16_rn does on the device, where trainrun/core/bf16.h keeps the payload).
#pragma once

#include <cstdint>

#include "trainrun/core/bf16.h"

struct __nv_bfloat16 {
  uint16_t __x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  if ((trainrun::f32_bits(f) & 0x7fffffffu) > 0x7f800000u) return {0x7fff};
  return {trainrun::bf16_from_f32(f)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
  return trainrun::bf16_to_f32(h.__x);
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
  return h.__x;
}
