// ParamStore: every parameter of a model in one flat buffer, gradients in another.
// Modules declare their parameters once (name, shape, init, weight decay) and keep views;
// allreduce, ZeRO sharding, AdamW and checkpoints then work on a few large contiguous ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/backend.h"
#include "trainrun/param_entry.h"

namespace trainrun {

enum class Init { normal, zeros, ones };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements into the flat buffers
  int64_t numel = 0;
  Init init = Init::zeros;
  float init_std = 0.0f;
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings, not biases/norms)
};

class ParamStore {
 public:
  explicit ParamStore(Backend& be, DType dtype = DType::f32) : be_(be), dtype_(dtype) {}
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Declaration phase: returns the parameter's index. Names must be unique.
  int declare(const std::string& name, std::vector<int64_t> shape, Init init, float std,
              bool decay);
  // Allocates params and grads (grads zeroed); views handed out before this are invalid.
  void allocate();
  // Deterministic initialisation: each parameter draws from its own stream hash(seed, name), so
  // the result does not depend on declaration order or thread count.
  void initialize(uint64_t seed);

  Tensor param(int i) const;
  Tensor grad(int i) const;
  Tensor params() const { return flat(params_); }
  Tensor grads() const { return flat(grads_); }
  int64_t numel() const { return total_; }
  DType dtype() const { return dtype_; }
  const std::vector<ParamInfo>& infos() const { return infos_; }
  std::vector<ParamEntry> entries() const;  // for checkpoints
  Backend& backend() const { return be_; }

 private:
  Tensor flat(void* p) const;
  Tensor view(void* base, int i) const;

  Backend& be_;
  DType dtype_;
  std::vector<ParamInfo> infos_;
  int64_t total_ = 0;
  void* params_ = nullptr;
  void* grads_ = nullptr;
};

// Activation memory planned once: modules take() their buffers in bind(); the first pass only
// measures, then the arena allocates once and a second pass hands out real views.
class Arena {
 public:
  explicit Arena(Backend& be) : be_(be) {}
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Tensor take(DType dt, std::initializer_list<int64_t> shape);
  size_t mark() const { return offset_; }
  void rewind(size_t mark) { offset_ = mark; }  // reuse: buffers after mark are shared
  // Ends the measuring pass: allocates the high-water mark and restarts handing out views.
  void allocate();
  void restart() { offset_ = 0; }
  bool allocated() const { return base_ != nullptr || (measured_ && high_ == 0); }
  size_t bytes() const { return high_; }
  // Zeroes the bytes [begin, end) handed out between two marks (gradient scratch).
  void zero(size_t begin, size_t end);

 private:
  Backend& be_;
  char* base_ = nullptr;
  size_t offset_ = 0;
  size_t high_ = 0;
  bool measured_ = false;
};

}  // namespace trainrun
