// ParamStore: every parameter of a model in one flat buffer, gradients in another.
// Modules declare their parameters once (name, shape, init, weight decay) and keep views;
// allreduce, ZeRO sharding, AdamW and checkpoints then work on a few large contiguous ranges.
//
// Mixed precision (dtype bf16, docs/cuda.md "bf16 mixed precision"): the flat parameter and
// gradient buffers stay f32 (the master weights, what AdamW, the gradient allreduce and
// checkpoints see), and a third flat buffer holds a bf16 compute copy of the parameters, which
// param(i) views and the modules read. The copy is rounded from the masters (nearest even) by
// refresh_compute(): initialize() calls it, and whoever writes the masters otherwise (the
// optimizer step and its ZeRO all-gather, a checkpoint load, a broadcast) must call it before
// the next forward. Parameter gradients grad(i) are f32 views: the backend takes them beside
// bf16 activations (Backend::f32_param_grads_with_bf16).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/param_entry.h"

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

  Tensor param(int i) const;  // the compute copy's view (the master's unless bf16)
  Tensor grad(int i) const;   // master dtype
  Tensor params() const { return flat(params_, master_dtype()); }  // the masters
  Tensor grads() const { return flat(grads_, master_dtype()); }
  // The flat compute copy: params() itself unless dtype() is bf16.
  Tensor compute_params() const;
  // Rounds the master weights into the compute copy; a no-op unless dtype() is bf16.
  void refresh_compute();
  int64_t numel() const { return total_; }
  // A hash of the master weights' bits: equal exactly when the weights are bit-identical (as every
  // rank's must be after a step; the logs print it so a test or a person can check).
  uint64_t checksum() const;
  // The activation and compute dtype the modules use.
  DType dtype() const { return dtype_; }
  // The dtype of the master weights, gradients and optimizer moments: f32 under bf16.
  DType master_dtype() const { return dtype_ == DType::bf16 ? DType::f32 : dtype_; }
  // The dtype of saved statistics (norm mean/rstd, attention and loss lse) and per-token losses:
  // f32 under bf16, so softmax and the loss are never recomputed from a rounded lse.
  DType stats_dtype() const { return master_dtype(); }
  // Gradients without a zeroing pass (a GPT-2-small step spent 3% zeroing them). begin_grads()
  // marks every parameter's gradient stale instead of filling it with zeros; the first op of the
  // step that produces a parameter's gradient asks grad_write(i), gets GradWrite::overwrite
  // (once, then accumulate: later micro-batches add), and overwrites the stale values.
  // zero_stale(begin, end) zeroes the gradients in that element range of the flat buffer that no
  // op wrote, and must run before anything reads the range (the gradient allreduce, the norm,
  // the optimizer). Without begin_grads() every gradient counts as written: ops accumulate into
  // whatever the caller zeroed, as before.
  void begin_grads();
  GradWrite grad_write(int i);
  void zero_stale(int64_t begin, int64_t end);
  const std::vector<ParamInfo>& infos() const { return infos_; }
  std::vector<ParamEntry> entries() const;  // for checkpoints
  Backend& backend() const { return be_; }

 private:
  Tensor flat(void* p, DType dt) const;
  Tensor view(void* base, DType dt, int i) const;

  Backend& be_;
  DType dtype_;
  std::vector<ParamInfo> infos_;
  std::unordered_set<std::string> names_;  // declared names: one lookup per declare, not a scan
  int64_t total_ = 0;
  void* params_ = nullptr;
  void* grads_ = nullptr;
  void* compute_ = nullptr;     // bf16 only
  std::vector<uint8_t> stale_;  // per parameter: gradient not yet written since begin_grads()
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
