#include "bf16_staging.h"

#include "trainrun/core/bf16.h"

namespace trainrun::cpu {

void bf16_round(uint16_t* dst, const float* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_from_f32(src[i]);
}

void bf16_widen(float* dst, const uint16_t* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

float* Bf16Staging::load(const Tensor& t, bool written) {
  if (used_ == slots_.size()) slots_.emplace_back();
  Slot& s = slots_[used_++];
  s.n = t.numel();
  s.f32.resize(static_cast<size_t>(s.n));
  s.dst = written ? static_cast<uint16_t*>(t.data) : nullptr;
  bf16_widen(s.f32.data(), static_cast<const uint16_t*>(t.data), s.n);
  return s.f32.data();
}

void Bf16Staging::store() {
  for (size_t i = 0; i < used_; ++i) {
    Slot& s = slots_[i];
    if (s.dst) bf16_round(s.dst, s.f32.data(), s.n);
    s.dst = nullptr;
  }
  used_ = 0;
}

}  // namespace trainrun::cpu
