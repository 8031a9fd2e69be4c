// Backend: the op set, and the only code that knows which device the memory lives on.
// The CPU backend (src/backend/cpu/) is the reference; the CUDA backend (kernels/, loaded as a
// plugin) must match it within stated tolerances (tests/test_backend_ops.cpp, suite `gpu`).
// Modules are written once, over these ops.
//
// The seam (as ggml's backend interface): the public op methods are not virtual. They validate
// presence, device, dtypes and shapes once, for every backend (src/backend/backend.cpp), and
// throw std::invalid_argument naming the op and the shapes; then they call the backend's
// protected *_impl method, which may assume all of that. So a wrong call fails with the same
// message on every backend, and a backend implements arithmetic only.
//
// Conventions every implementation follows:
//  - Shapes are read from the tensors; rows x cols means [..., cols] flattened.
//  - Forward ops overwrite their output.
//  - Backward ops ACCUMULATE (+=) into every gradient they produce, input and parameter
//    gradients alike. The trainer zeroes parameter gradients once per step, so gradient
//    accumulation over micro-batches is free. The ops whose input gradient is often a module's
//    private buffer (matmul_backward's din, the activations' din) also take
//    GradWrite::overwrite: din = ..., its old contents never read, which saves zeroing that
//    buffer and reading the zeros back (attention_backward's dqkv too). The ops producing parameter
//    gradients (matmul_backward, layernorm_backward, rmsnorm_backward) take a second GradWrite for
//    those: the first write of a step overwrites (ParamStore::grad_write), so no pass zeroes the
//    gradients each step.
//  - Every tensor of a call lives on the backend's device (copy() alone also takes host
//    tensors). All float tensors of one call share a dtype, with two exceptions under bf16
//    activations: saved statistics (layernorm mean/rstd, rmsnorm rstd, attention lse,
//    cross-entropy losses/lse) may be f32, and parameter-gradient outputs (matmul_backward
//    dw/dbias, layernorm_backward dw/db, rmsnorm_backward dw, embedding_backward dtable) may be
//    f32 where f32_param_grads_with_bf16() says so. Mixed-precision training (docs/cuda.md,
//    "bf16 mixed precision") keeps parameter gradients f32 so that micro-batch accumulation and
//    the gradient allreduce never round to bf16. Index tensors are i32. Which dtypes a backend
//    computes: supports().
//  - bf16 storage means: load bf16 -> f32, compute and accumulate in f32, round to nearest even
//    on store (trainrun/core/bf16.h). The CPU backend does exactly that, op by op, as the reference
//    the CUDA kernels are compared against; an accumulating (+=) bf16 output is loaded, added to
//    in f32 and rounded once.
//  - A token id outside [0, rows) throws DataError naming the first bad position, on every
//    backend: the CPU checks the ids before the kernel and throws from the op; the CUDA kernels
//    flag them and the backend throws at the next point where the host waits for the device
//    anyway (a reduction such as sum(), a copy to the host, synchronize()), so that checking
//    ids never stalls the step. Either way nothing is read out of bounds, and the error is raised
//    before any result of the op reaches the host.
//
// Thread safety: none. Call from one thread at a time; which thread may change from call to call
// (the CUDA backend selects its GPU on every call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/core/tensor.h"

namespace trainrun {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
  // Multiplies every gradient before it is used (gradient clipping's factor, 1 = none): folded
  // into the update's one pass instead of a scale() pass of its own over the gradients, which
  // stay unscaled in their buffer.
  double grad_scale = 1.0;
};

// A run [begin, begin + n) of the optimizer's flat buffers and whether weight decay applies to it
// (decay is per parameter: matrices yes, biases and norms no).
struct AdamWRun {
  int64_t begin = 0, n = 0;
  bool decay = false;
};

// Every op of the set, for supports() and for naming ops in messages and tests.
enum class Op : uint8_t {
  copy,  // raw bytes between host and device; any dtype
  cast,  // copy between float dtypes with equal element counts, both on the device
  fill,
  matmul,
  matmul_backward,
  layernorm,
  layernorm_backward,
  gelu,
  gelu_backward,
  relu,
  relu_backward,
  dropout,
  dropout_backward,
  add,
  accumulate,
  scale,
  attention,
  attention_backward,
  embedding,
  embedding_backward,
  cross_entropy,
  cross_entropy_backward,
  rmsnorm,
  rmsnorm_backward,
  rope,
  rope_backward,
  swiglu,
  swiglu_backward,
  sum,
  sum_squares,
  adamw,
};
inline constexpr int kOpCount = static_cast<int>(Op::adamw) + 1;
const char* op_name(Op op);

// How a backward op writes an input gradient: add to it (the default), or replace it.
enum class GradWrite : uint8_t { accumulate, overwrite };

// Which clock an op's time was taken on (OpObserver::op_done).
enum class OpClock : uint8_t {
  host,    // wall time around the call (the CPU; a device synchronised after the op)
  device,  // the device's own timestamps around the op's work (CUDA events), mapped onto the
           // steady clock; reported in order at Backend::report_op_times, not as the op runs
};

// Told the time of every op a backend runs while it is set (Backend::set_op_observer): what
// `trainrun --profile` tabulates per op. The CPU reports each op's wall time as it returns. A
// backend that times ops on the device (CUDA: a pair of events around each, no waiting) reports
// them later, in call order, when report_op_times() runs (set_op_observer runs it too); any
// other device backend synchronises after each observed op and reports wall time.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // t0, t1: steady-clock seconds (now()), on `clock`.
  virtual void op_done(Op op, double t0, double t1, OpClock clock) = 0;
  static double now();
};

class Backend;

// A Backend::range_push / range_pop pair around a scope.
class BackendRange {
 public:
  BackendRange(Backend& be, const char* name);
  ~BackendRange();
  BackendRange(const BackendRange&) = delete;
  BackendRange& operator=(const BackendRange&) = delete;

 private:
  Backend& be_;
};

// Memory of one backend, released with the object (alloc/release as RAII).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  void* data() const { return p_; }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (oneDNN sgemm, 2 OpenMP threads)"

  // True when this backend computes `op` on (float) tensors of dtype `dt`: the activation dtype
  // of the call (for copy, fill, sum: the tensor's dtype; for cast: each side's). Ask before a
  // run; an unsupported call throws std::invalid_argument.
  virtual bool supports(Op op, DType dt) const = 0;
  // True when every op that produces parameter gradients takes them in f32 beside bf16
  // activations (the exception above): what `train.precision: bf16` needs besides
  // supports(op, bf16). Without it such a call is refused.
  virtual bool f32_param_grads_with_bf16() const { return false; }
  // The largest attention head dimension (C / n_head) this backend computes; 0 means no limit.
  virtual int64_t max_head_dim() const { return 0; }
  // Bytes of device memory in use now (a GPU: total less free, this process's allocations and
  // its CUDA context; allocations are made once, so late in a run this is the peak); -1 where
  // the backend does not know (the CPU).
  virtual double device_memory_in_use() const { return -1; }

  // ---- memory ----
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Copies between any two tensors of equal bytes; either may live on the host or this device.
  // Two float tensors of different dtypes and equal element counts, both on this device, are a
  // cast instead where supports(Op::cast, ...) says so for both dtypes (CUDA: f32 <-> bf16).
  void copy(Tensor dst, Tensor src);
  void fill(Tensor x, double value);  // any dtype; an empty tensor is a no-op
  virtual void synchronize() {}
  // nullptr (the default) observes nothing; the observer must outlive its setting. The old
  // observer is first told the device-timed ops it has not been told yet (report_op_times).
  void set_op_observer(OpObserver* o) {
    report_op_times();
    observer_ = o;
  }
  OpObserver* op_observer() const { return observer_; }
  // Tells the observer the device-timed ops it has not been told yet, in call order; waits for
  // the device when there are any. Nothing to do on a backend that reports ops as they return.
  void report_op_times();
  // Named ranges for a GPU profiler (NVTX on CUDA: `nsys` shows them over the kernels): every op
  // is one, named for it, and the trainer's phases and the model's blocks wrap theirs
  // (BackendRange). No-ops on the CPU. Every push has its pop, on the same thread.
  virtual void range_push(const char* name) { (void)name; }
  virtual void range_pop() {}

  // ---- dense ----
  // out[N,OC] = in[N,C] . w[OC,C]^T + bias[OC] (bias may be empty)
  void matmul(Tensor out, Tensor in, Tensor w, Tensor bias);
  // din[N,C] += dout . w ; dw[OC,C] += dout^T . in ; dbias[OC] += colsum(dout).
  // din, dw and dbias may each be empty (skipped), din and dw not both; dbias only with dw (an
  // input gradient alone, then the parameters' alone, is what tensor parallelism's overlap
  // needs). `write` applies to din, `param_write` to dw and dbias.
  void matmul_backward(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                       GradWrite write = GradWrite::accumulate,
                       GradWrite param_write = GradWrite::accumulate);
  // A Linear with GELU after it (the MLP's fc), in one op where the backend can fuse them (a GPU:
  // cuBLASLt's GELU epilogue): pre = matmul(in, w, bias), out = gelu(pre); pre is kept for the
  // backward.
  void matmul_gelu(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias);
  // The Linear after that GELU (the MLP's proj), its input gradient taken through the GELU:
  // dpre[N,C] = (dout . w) * gelu'(pre), overwritten (GradWrite::overwrite); dw and dbias as
  // matmul_backward.
  void matmul_backward_gelu(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                            Tensor pre, GradWrite param_write = GradWrite::accumulate);

  // ---- normalisation and activations ----
  // out = (in - mean) * rstd * w + b over the last dim; mean, rstd: [rows] (saved for backward)
  void layernorm(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w, Tensor b);
  // din += ; dw, db += (or =, with param_write overwrite).
  void layernorm_backward(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                          Tensor mean, Tensor rstd, GradWrite param_write = GradWrite::accumulate);
  // The residual add and the layernorm after it (a pre-norm block's x1 = x + attn, norm2(x1)), in
  // one op where the backend can fuse them (a GPU reads the rows once instead of three times):
  // sum = x + y as add(), then layernorm(out, mean, rstd, sum, w, b) on the stored (rounded) sum.
  // sum may alias x or y.
  void residual_layernorm(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x, Tensor y,
                          Tensor w, Tensor b);
  // RMSNorm over the last dim: out = in * rstd * w; rstd [rows] = 1 / sqrt(mean(in^2) + 1e-5),
  // saved for backward. din [rows,C] += ; dw [C] += (or =, with param_write overwrite).
  void rmsnorm(Tensor out, Tensor rstd, Tensor in, Tensor w);
  void rmsnorm_backward(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                        GradWrite param_write = GradWrite::accumulate);
  // sum = x + y, then rmsnorm(out, rstd, sum, w): residual_layernorm's RMSNorm counterpart.
  void residual_rmsnorm(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y, Tensor w);
  // GELU, tanh approximation (GPT-2's)
  void gelu(Tensor out, Tensor in);
  // din += (or =) gelu'(in) * dout; with GradWrite::overwrite din may be dout (in place).
  void gelu_backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate);
  void relu(Tensor out, Tensor in);
  void relu_backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate);
  // Inverted dropout with probability p in [0, 1); the mask is a pure function of (seed,
  // element index) (dropout_mask.h), so backward recomputes it and a resumed run draws the same.
  void dropout(Tensor out, Tensor in, float p, uint64_t seed);
  void dropout_backward(Tensor din, Tensor dout, float p, uint64_t seed);

  // ---- elementwise ----
  void add(Tensor out, Tensor a, Tensor b);  // out = a + b (out may alias a or b)
  void accumulate(Tensor dst, Tensor src);   // dst += src
  void scale(Tensor x, double s);            // x *= s

  // ---- attention ----
  // Causal multi-head self-attention. qkv: [B,T,3C] laid out as (q | k | v), each [B,T,NH,hd].
  // out: [B,T,C]; lse: [B,NH,T] row log-sum-exp of the scaled scores, saved so backward can
  // recompute probabilities without storing a T x T matrix.
  // Grouped-query attention: n_kv_head (0 = n_head, the layout above) k and v heads, shared by
  // n_head / n_kv_head query heads each (n_kv_head divides n_head; 1 = multi-query).
  // qkv [B,T,(n_head + 2*n_kv_head)*hd] = (q | k | v); q head h reads kv head
  // h / (n_head / n_kv_head); out [B,T,n_head*hd]; lse [B,n_head,T].
  // Document masking: doc_start [B,T] (i32; empty = one document per row) holds, for each
  // position t, the first position of its document (0 <= doc_start[b,t] <= t): query t then sees
  // only keys j with doc_start[b,t] <= j <= t (documents.h), so packed documents do not attend
  // to each other. The same tensor goes to attention_backward.
  void attention(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head = 0,
                 Tensor doc_start = {});
  // The head dimension hd of such a qkv (n_kv_head already resolved, not 0): the one derivation
  // the public checks and every backend's kernels use.
  static int64_t head_dim(const Tensor& qkv, int n_head, int n_kv_head) {
    return qkv.dim(2) / (n_head + 2 * int64_t{n_kv_head});
  }
  // dqkv += (or =, GradWrite::overwrite: its old contents never read, so the module need not
  // zero it first) the gradient for q, k and v.
  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head,
                          int n_kv_head = 0, Tensor doc_start = {},
                          GradWrite write = GradWrite::accumulate);
  // Rotary position embedding on the q and k heads of qkv [B,T,(n_head + 2*n_kv_head)*hd]
  // (n_kv_head 0 = n_head). Position t is the index along T, or with doc_start (as attention's)
  // its offset in its document, t - doc_start[b,t]. Within each q or k head the pair
  // (x[i], x[i + hd/2]), i < hd/2, turns by angle t * theta^(-2i/hd) (GPT-NeoX / Hugging Face
  // Llama "rotate_half"): x'[i] = x[i] cos - x[i+hd/2] sin, x'[i+hd/2] = x[i+hd/2] cos + x[i] sin.
  // v is copied unchanged. out may alias in. hd must be even, theta > 0.
  void rope(Tensor out, Tensor in, int n_head, int n_kv_head, float theta, Tensor doc_start = {});
  // din += (or =, GradWrite::overwrite) R^T dout on the q and k heads (rotation by -angle), and
  // dout on v. With overwrite din may alias dout: the gradient turned back in place, as rope's.
  void rope_backward(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                     Tensor doc_start = {}, GradWrite write = GradWrite::accumulate);

  // ---- gated MLP ----
  // SwiGLU: in [N,2H] = (gate | up); out [N,H] = silu(gate) * up, silu(x) = x / (1 + e^-x).
  void swiglu(Tensor out, Tensor in);
  void swiglu_backward(Tensor din, Tensor dout, Tensor in,  // din [N,2H] +=
                       GradWrite write = GradWrite::accumulate);

  // ---- embedding ----
  // out[N,C] = table[ids[n], :] ; dtable[ids[n], :] += dout[n, :]. An id of kNoId
  // (core/no_id.h: another vocabulary-parallel rank's) gives a zero row and no gradient.
  void embedding(Tensor out, Tensor ids, Tensor table);
  void embedding_backward(Tensor dtable, Tensor dout, Tensor ids);

  // ---- loss ----
  // losses[N] = logsumexp(logits[n]) - logits[n, targets[n]]; lse[N] saved. A target of kNoId
  // (core/no_id.h: held by another vocabulary-parallel rank) has no term: the loss is the lse,
  // and the gradient below has no one-hot.
  void cross_entropy(Tensor losses, Tensor lse, Tensor logits, Tensor targets);
  // dlogits[N,V] = (softmax(logits) - onehot(targets)) * scale. Overwrites (not +=) and may
  // alias logits: the fused form never holds a second [N,V] tensor.
  void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                              float scale);
  // The fused classifier (training): cross_entropy, then cross_entropy_backward(dlogits, logits,
  // lse, targets, scale), with exactly those two calls' results, in one pass over each row (a GPU
  // reads the logits from memory once). dlogits may alias logits.
  void cross_entropy_fused(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits, Tensor targets,
                           float scale);

  // ---- reductions ----
  // The result comes back to the host: the host waits for the device.
  double sum(Tensor x);
  double sum_squares(Tensor x);  // NaN/Inf propagate, so callers detect bad steps
  // out = sum(x), accumulated in double as sum(), left on the device: `out` is one f64 element
  // there, and the host does not wait (the trainer reads a whole step's losses in one copy).
  void sum_to(Tensor out, Tensor x);

  // ---- optimizer ----
  // Fused AdamW with decoupled weight decay over a contiguous range of the flat buffers, on
  // grad * hp.grad_scale.
  void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp);
  // The same over several runs of those buffers in one call (one kernel launch on a GPU, rather
  // than one per run of equal decay): hp.weight_decay on the runs with decay, 0 on the others.
  // Runs are sorted, disjoint and inside the four equal-length tensors; elements between runs
  // are left alone.
  void adamw_runs(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                  const std::vector<AdamWRun>& runs);

 protected:
  // The implementations. Each is called only with what its public method validated: required
  // tensors present, every tensor on this device, a dtype supports() accepts, consistent shapes,
  // p in [0, 1), step >= 1, and (for host-resident ids) ids in range. Device-resident ids are
  // the implementation's to check; it reports a bad one through fail_out_of_range_id.
  virtual void copy_impl(Tensor dst, Tensor src) = 0;  // equal bytes
  virtual void cast_impl(Tensor dst, Tensor src);      // only where supports(Op::cast, ...)
  virtual void fill_impl(Tensor x, double value) = 0;
  virtual void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor bias) = 0;
  virtual void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                                    Tensor w, GradWrite write, GradWrite param_write) = 0;
  // Defaults: the unfused ops (matmul then gelu; matmul_backward into dpre, then gelu_backward
  // in place), which is the CPU's reference; the CUDA backend fuses where cuBLASLt can.
  virtual void matmul_gelu_impl(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias);
  virtual void matmul_backward_gelu_impl(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout,
                                         Tensor in, Tensor w, Tensor pre, GradWrite param_write);
  virtual void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                              Tensor b) = 0;
  virtual void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in,
                                       Tensor w, Tensor mean, Tensor rstd,
                                       GradWrite param_write) = 0;
  // Defaults (the CPU, the reference): add_impl, then the norm's implementation on the sum.
  virtual void residual_layernorm_impl(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x,
                                       Tensor y, Tensor w, Tensor b);
  virtual void residual_rmsnorm_impl(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y,
                                     Tensor w);
  virtual void gelu_impl(Tensor out, Tensor in) = 0;
  virtual void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) = 0;
  virtual void relu_impl(Tensor out, Tensor in) = 0;
  virtual void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) = 0;
  virtual void dropout_impl(Tensor out, Tensor in, float p, uint64_t seed) = 0;
  virtual void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t seed) = 0;
  virtual void add_impl(Tensor out, Tensor a, Tensor b) = 0;
  virtual void accumulate_impl(Tensor dst, Tensor src) = 0;
  virtual void scale_impl(Tensor x, double s) = 0;
  // n_kv_head arrives resolved: never 0, always a divisor of n_head. doc_start may be empty.
  virtual void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                              Tensor doc_start) = 0;
  virtual void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                       int n_head, int n_kv_head, Tensor doc_start,
                                       GradWrite write) = 0;
  virtual void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) = 0;
  virtual void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w,
                                     Tensor rstd, GradWrite param_write) = 0;
  virtual void rope_impl(Tensor out, Tensor in, int n_head, int n_kv_head, float theta,
                         Tensor doc_start) = 0;
  virtual void rope_backward_impl(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                                  Tensor doc_start, GradWrite write) = 0;
  virtual void swiglu_impl(Tensor out, Tensor in) = 0;
  virtual void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) = 0;
  virtual void embedding_impl(Tensor out, Tensor ids, Tensor table) = 0;
  virtual void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) = 0;
  virtual void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) = 0;
  virtual void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse,
                                           Tensor targets, float scale) = 0;
  // Default: the two calls' implementations in turn (the CPU, the reference).
  virtual void cross_entropy_fused_impl(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                        Tensor targets, float scale);
  virtual double sum_impl(Tensor x, bool squares) = 0;
  // Default: sum_impl, its result copied to `out` (what the CPU needs); a device overrides it
  // with a reduction that writes `out` itself.
  virtual void sum_to_impl(Tensor out, Tensor x);
  virtual void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) = 0;
  // Default: adamw_impl on each run's slices (the CPU); the CUDA backend makes it one launch.
  virtual void adamw_runs_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                               const std::vector<AdamWRun>& runs);

  // Device op timing (OpClock::device), for a backend that can: op_time_begin() is called before
  // an observed op and returns true when the backend will time it (it marks the op's start on
  // the device; false, the default: the op is timed on the host); op_time_end(op) marks its end
  // after the op returned (not after one that threw); report_op_times_impl(o) waits for the
  // device and tells `o` every marked op since the last report, in order.
  virtual bool op_time_begin() { return false; }
  virtual void op_time_end(Op op) { (void)op; }
  virtual void report_op_times_impl(OpObserver& o) { (void)o; }

  // The DataError for a token id outside [0, limit) at position `index` of `name`, worded the
  // same on every backend.
  [[noreturn]] static void fail_out_of_range_id(Op op, const char* name, int64_t index,
                                                int64_t value, int64_t limit);

 private:
  friend class OpTimer;  // backend.cpp: times each public op for the observer
  OpObserver* observer_ = nullptr;
};

std::unique_ptr<Backend> make_cpu_backend();

// Loads libtrainrun_cuda.so from beside the executable (dlopen) and creates its backend for the
// rank at `local_rank` on its node, on the GPU the plugin chooses among the visible ones (GPU
// local_rank % count: kernels/gpu_binding.h). Returns null and says why in `why_not` when the
// plugin, the CUDA libraries, a driver or a GPU is missing; never fails to start the CPU-only
// binary.
std::unique_ptr<Backend> make_cuda_backend(int local_rank, std::string* why_not);

// Peak fp32 GEMM rate of this backend in GFLOP/s, measured now on square-ish GEMMs of the given
// size (CPU: oneDNN sgemm on the current OpenMP threads). Used for MFU and `trainrun plan`.
double measure_gemm_peak_gflops(Backend& be, int size);

// The peak MFU divides by. A short measurement reads low when the machine is busy (and MFU then
// reads high), so the best rate ever measured on this machine for the same backend, thread count
// and CPU is kept in `cache_file` ("" = none), and the peak is the higher of that and this run's
// measurement. `source` says which, for the run's header. A missing or unreadable cache is
// ignored; writing it is best effort (atomic rename) and never fails a run.
struct GemmPeak {
  double gflops = 0;
  std::string source;
};
GemmPeak gemm_peak(Backend& be, int size, const std::string& cache_file);
// $XDG_CACHE_HOME/trainrun/gemm-peak.tsv, else $HOME/.cache/trainrun/gemm-peak.tsv, else "".
std::string default_gemm_peak_cache();

}  // namespace trainrun
