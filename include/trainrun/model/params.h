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
//
// Units (FSDP's flat parameters): the model groups its parameters into units, runs of parameters
// declared together (the embeddings, each transformer block, the final norm and head), and
// brackets each unit's use with acquire/release. With ParamStorage::flat every unit lives in the
// flat buffers and the brackets cost nothing. With ParamStorage::external the store allocates no
// parameter or gradient memory: a data-parallel strategy that shards them (ZeRO-2/3,
// train/sharded_data_parallel.h) is the UnitResidency, gathers a unit's parameters when it is
// acquired, binds them here (bind_unit), and reduces and unbinds its gradients when it is
// released. param(i) and grad(i) resolve through the unit's binding, so no module knows the layout.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/param_entry.h"
#include "trainrun/core/shard.h"

namespace trainrun {

enum class Init { normal, zeros, ones };

// The tensor-parallel group the model's layers split over: this rank's place in it and its
// communicator for device tensors (null when size is 1).
struct TensorParallel {
  int size = 1, rank = 0;
  Communicator* comm = nullptr;
  // Overlap a column-parallel layer's input-gradient all-reduce with its weight-gradient GEMM
  // (linear.h); off, the two run one after the other. Same arithmetic either way.
  bool overlap = true;
};

// How a parameter splits over the tensor-parallel ranks: whole on every rank (replicated: norms,
// embeddings, a row-parallel layer's bias), by rows (dimension 0: a column-parallel layer's
// weight and bias), or by columns (dimension 1: a row-parallel layer's weight). A split by rows
// may cut blocks of rows each on its own (a fused q|k|v or gate|up weight: each rank takes its
// share of every block), so each rank holds whole heads of q, k and v.
struct TpSplit {
  enum class Dim { none, rows, cols };
  Dim dim = Dim::none;
  std::vector<int64_t> blocks;  // rows: the blocks' row counts (summing to the rows); empty: one
  static TpSplit rows(std::vector<int64_t> blocks = {}) { return {Dim::rows, std::move(blocks)}; }
  static TpSplit cols() { return {Dim::cols, {}}; }
};

// A run of parameters [first, last), elements [begin, end) of the flat layout.
struct ParamUnit {
  std::string name;  // "embed", "blocks.3", "head"; "model" when the model declares none
  int first = 0, last = 0;
  int64_t begin = 0, end = 0;
  int64_t numel() const { return end - begin; }
};

enum class Pass { forward, backward };

// Told when the model needs a unit's parameters and when it is done with them. Forward acquires
// units in increasing order and backward in decreasing order; a unit may be acquired before the
// one before it is released (a block's last residual add runs fused into the next block's
// norm), and a unit may be acquired again while held (a tied head reads the embeddings). Each
// acquire is matched by one release of the same pass. Between a unit's acquire and release its
// parameters are bound, and in the backward pass its gradients too; the backward release means
// the unit's gradients of this micro-batch are final.
class UnitResidency {
 public:
  virtual ~UnitResidency() = default;
  virtual void acquire(int unit, Pass pass) = 0;
  virtual void release(int unit, Pass pass) = 0;
};

// Who owns the parameters' memory: the store (flat buffers) or a UnitResidency (bind_unit).
enum class ParamStorage { flat, external };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // this rank's part (the whole tensor unless split)
  std::vector<int64_t> global_shape;
  std::vector<Box> pieces;  // the boxes of the global tensor held, in order; empty: all of it
  int64_t offset = 0;       // elements into the flat buffers
  int64_t numel = 0;
  Init init = Init::zeros;
  float init_std = 0.0f;
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings, not biases/norms)
};

class ParamStore {
 public:
  explicit ParamStore(Backend& be, DType dtype = DType::f32,
                      ParamStorage storage = ParamStorage::flat, TensorParallel tp = {})
      : be_(be), dtype_(dtype), storage_(storage), tp_(tp) {}
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Declaration phase: returns the parameter's index. Names must be unique. `shape` is the
  // global shape; the store holds this rank's part of it under `split`.
  int declare(const std::string& name, std::vector<int64_t> shape, Init init, float std, bool decay,
              const TpSplit& split = {});
  const TensorParallel& tp() const { return tp_; }
  // Whether parameter i is whole on every tensor-parallel rank (its gradient too: every rank
  // computes it from the same values), so a norm over the ranks counts it once.
  bool tp_replicated(int i) const { return infos_[static_cast<size_t>(i)].pieces.empty(); }
  // Parameters declared from now on form a new unit (an empty current unit is renamed).
  void begin_unit(const std::string& name);
  // Flat storage: allocates params and grads (grads zeroed) and binds every unit to them; views
  // handed out before this are invalid. External storage: allocates nothing, binds nothing.
  void allocate();
  // Deterministic initialisation: each parameter draws from its own stream hash(seed, name), so
  // the result does not depend on declaration order or thread count. Flat storage only.
  void initialize(uint64_t seed);
  // The same values for the flat elements `pieces` (ascending, disjoint) only, packed in order
  // into `out` (master dtype): what a rank that holds a shard of the weights initialises.
  void initialize(uint64_t seed, const std::vector<Shard>& pieces, Tensor out) const;

  // Throw std::logic_error when the parameter's unit has no binding (external storage, outside
  // its acquire/release).
  Tensor param(int i) const;  // the compute copy's view (the master's unless bf16)
  Tensor grad(int i) const;   // master dtype
  // The flat buffers (flat storage only: external storage throws std::logic_error).
  Tensor params() const { return flat(params_, master_dtype()); }  // the masters
  Tensor grads() const { return flat(grads_, master_dtype()); }
  ParamStorage storage() const { return storage_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  // External storage: where unit u's parameters (compute dtype) and gradients (master dtype)
  // are, each pointing at the unit's first element; nullptr unbinds.
  void bind_unit(int u, void* params, void* grads);
  // The model's brackets (see UnitResidency); no-ops without a residency.
  void set_residency(UnitResidency* r) { residency_ = r; }
  void acquire(int u, Pass pass) {
    if (residency_) residency_->acquire(u, pass);
  }
  void release(int u, Pass pass) {
    if (residency_) residency_->release(u, pass);
  }
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
  // begin_grads() for unit u's parameters alone (a fresh gradient buffer bound for it).
  void begin_grads(int u);
  GradWrite grad_write(int i);
  void zero_stale(int64_t begin, int64_t end);
  const std::vector<ParamInfo>& infos() const { return infos_; }
  std::vector<ParamEntry> entries() const;  // for checkpoints
  // The whole model's entries (every parameter at its global shape, laid out as a store without
  // tensor parallelism lays them out), for what reads whole tensors (a Hugging Face folder).
  std::vector<ParamEntry> whole_entries() const;
  // This rank's part of a buffer laid out as whole_entries(), into `local` (numel() floats, this
  // store's flat layout).
  void take_part(const float* whole, float* local) const;
  Backend& backend() const { return be_; }

 private:
  Tensor flat(void* p, DType dt) const;
  Tensor view(const std::vector<char*>& unit_base, DType dt, int i, const char* what) const;

  Backend& be_;
  DType dtype_;
  ParamStorage storage_;
  TensorParallel tp_;
  std::vector<ParamInfo> infos_;
  std::vector<ParamUnit> units_;
  std::vector<int> unit_of_;                     // per parameter
  std::vector<char*> unit_params_, unit_grads_;  // per unit: its bound element 0, or null
  UnitResidency* residency_ = nullptr;
  bool allocated_ = false;
  std::unordered_set<std::string> names_;  // declared names: one lookup per declare, not a scan
  int64_t total_ = 0;
  void* params_ = nullptr;
  void* grads_ = nullptr;
  void* compute_ = nullptr;     // bf16 only
  std::vector<uint8_t> stale_;  // per parameter: gradient not yet written since begin_grads()
};

// The parameter checksum's hash (ParamStore::checksum) continued over `t`'s f32 elements in
// order: a sharded store hashes its units one by one, in flat order, to the same value.
uint64_t checksum_continue(uint64_t h, Backend& be, Tensor t);

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

// Where a transformer block's modules bind their activations: the outputs of GEMMs and attention
// (and what a backward cannot recompute cheaply) in `kept`; the outputs of pointwise ops (norms,
// the MLP's activation, residual adds) in `pointwise`. Without checkpointing both are one arena.
// With train.activation_checkpointing=selective, `pointwise` is a region every block shares and
// the block's recompute refills it from `kept`; `recomputed` says so, so that a module computes
// those outputs in its forward exactly as its recomputation will (the same op, the same bits).
struct ActivationArenas {
  Arena& kept;
  Arena& pointwise;
  bool recomputed = false;
};

}  // namespace trainrun
