// exp and tanh for f32 loops that must vectorise. glibc's vector math (libmvec) is only used
// under -ffast-math, so std::exp and std::tanh in an `omp simd` loop stay one scalar libm call per
// element; these are plain arithmetic the vectoriser handles (it also needs -fno-trapping-math).
// The f64 overloads are the exact libm functions: the f64 path is the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace trainrun::cpu {

// exp(x) = 2^k e^r, k = round(x / ln2), r = x - k ln2 in [-ln2/2, ln2/2] (ln2 in two parts, so
// r stays exact to f32 for every k), e^r by its degree-6 Taylor polynomial (truncation < 2e-7
// relative) and 2^k built in the exponent bits. Relative error below 4e-7 (tests/test_cpu_ops).
// Inputs are clamped to [-87, 88], where 2^k stays a normal float: below -87 the result is
// about 1.6e-38 instead of smaller (an absolute error no sum of exps can see), above 88 about
// 1.6e38 instead of inf. NaN stays NaN (max before min: both pass a NaN first argument on).
inline float exp_vec(float x) {
  // std::min/max and the 1.5 * 2^23 rounding trick instead of fmin/fmax/nearbyint, which the
  // vectoriser does not handle without -ffast-math.
  const float c = std::min(std::max(x, -87.0f), 88.0f);
  const float t = c * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23 + round(c / ln2)
  const float k = t - 12582912.0f;                         // round(c / ln2)
  const float r = (c - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // k as an integer from t's low mantissa bits, where the rounding trick left it: a NaN x makes
  // k NaN, whose conversion to int is undefined, and a select to avoid that changed what the
  // vectoriser emits (other last bits). Unsigned, so NaN's bits wrap harmlessly; p is NaN then.
  uint32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof t_bits);
  const uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;  // 0x4B400000: 12582912.0f's bits
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double exp_vec(double x) {
  return std::exp(x);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); |u| > 9 saturates to within an ulp of +-1. Absolute error
// below 2e-7 for every input.
inline float tanh_vec(float u) {
  return 1.0f - 2.0f / (exp_vec(2.0f * std::min(std::max(u, -9.0f), 9.0f)) + 1.0f);
}
inline double tanh_vec(double u) {
  return std::tanh(u);
}

}  // namespace trainrun::cpu
