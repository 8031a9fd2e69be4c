// Bf16Staging: how the CPU reference computes on bf16 storage. Each bf16 tensor of a call is
// loaded into f32 scratch, the f32 kernel runs unchanged (f32 arithmetic and accumulation), and
// every tensor the op writes is rounded back to bf16, nearest even, once, when the call ends:
// exactly where a CUDA kernel stores bf16. Speed is not the point; bit-for-bit definability is.
//
// Inputs and outputs get separate scratch, so an op whose output may alias an input (add, rope,
// cross_entropy_backward) reads the input as it was. An accumulating (+=) output is loaded
// first, so the kernel adds onto its current value. f32 and f64 tensors pass through untouched
// (parameter gradients and saved statistics may be f32 beside bf16 activations).
//
// Ownership: the scratch buffers belong to the staging object and keep their capacity between
// calls. Thread safety: none (one per backend, which is single-threaded by contract).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "trainrun/core/tensor.h"

namespace trainrun::cpu {

class Bf16Staging {
 public:
  // The data of t as T*: itself unless t is bf16, then an f32 copy (T must be float). Null for an
  // empty tensor. A read-only input.
  template <class T>
  const T* in(const Tensor& t) {
    return stage<T>(t, false);
  }
  // The same for a tensor the op writes (overwrites or accumulates into): a bf16 one is rounded
  // back by store().
  template <class T>
  T* out(const Tensor& t) {
    return stage<T>(t, true);
  }
  // Rounds every staged output back into its bf16 tensor and frees the slots for the next call.
  void store();
  // Forgets the staged tensors without storing (the op threw).
  void drop() { used_ = 0; }

 private:
  template <class T>
  T* stage(const Tensor& t, bool written) {
    if (t.empty()) return nullptr;
    if (t.dtype != DType::bf16) return static_cast<T*>(t.data);
    if constexpr (std::is_same_v<T, float>)
      return load(t, written);
    else
      return nullptr;  // unreachable: bf16 calls dispatch with T = float
  }
  float* load(const Tensor& t, bool written);

  struct Slot {
    std::vector<float> f32;
    uint16_t* dst = nullptr;  // the bf16 tensor to store into; null for an input
    int64_t n = 0;
  };
  std::vector<Slot> slots_;
  size_t used_ = 0;
};

// Rounds n f32 values into bf16 storage (nearest even) and widens them back; the cast op.
void bf16_round(uint16_t* dst, const float* src, int64_t n);
void bf16_widen(float* dst, const uint16_t* src, int64_t n);

}  // namespace trainrun::cpu
