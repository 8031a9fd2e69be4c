// FaultyBackend: a Backend that forwards every call to the real one and injects the numeric
// faults of TRAINRUN_FAULTS (faults.h) at the op where each would arise, so the step loop carries
// no test code (leveldb's EnvWrapper idea). Created only when TRAINRUN_FAULTS names a fault for
// this rank (fault_injection.h); a normal run trains on the real backend itself.
//
//   nan: at the gradient norm of a step it names (sum_squares over the gradients: the first op
//        that reads the step's summed gradients), every gradient becomes NaN first.
//   inf: at the synchronize() that ends the step's update (the trainer's one synchronize of a
//        step, after the optimizer and the bf16 refresh), every weight becomes +inf, the masters
//        and the bf16 compute copy alike; once per process.
//
// Under --profile the wrapper times each op itself, on the host around the real backend's call
// (the real backend's device timers are out of its reach), and a GPU profiler sees each op's
// range twice: test runs only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data_parallel.h"
#include "faults.h"
#include "trainrun/backend/backend.h"
#include "trainrun/model/params.h"

namespace trainrun {

class FaultyBackend final : public Backend {
 public:
  // `faults` must outlive this backend.
  FaultyBackend(std::unique_ptr<Backend> real, Faults& faults);

  // The rank's training state: the gradients nan poisons, the weights inf overwrites. Until
  // then nothing is injected.
  void watch(const StateBuffers& state) { state_ = state; }
  // The Nth step (from 1, as faults name steps) begins.
  void begin_step(int64_t nth) { step_ = nth; }
  Backend& real() const { return *real_; }

  Device device() const override { return real_->device(); }
  std::string describe() const override { return real_->describe(); }
  bool supports(Op op, DType dt) const override { return real_->supports(op, dt); }
  bool f32_param_grads_with_bf16() const override { return real_->f32_param_grads_with_bf16(); }
  int64_t max_head_dim() const override { return real_->max_head_dim(); }
  double device_memory_in_use() const override { return real_->device_memory_in_use(); }
  void* alloc(size_t bytes) override { return real_->alloc(bytes); }
  void release(void* p) override { real_->release(p); }
  void synchronize() override;
  void range_push(const char* name) override { real_->range_push(name); }
  void range_pop() override { real_->range_pop(); }

 protected:
  void copy_impl(Tensor dst, Tensor src) override { real_->copy(dst, src); }
  void cast_impl(Tensor dst, Tensor src) override { real_->copy(dst, src); }
  void fill_impl(Tensor x, double value) override { real_->fill(x, value); }
  void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    real_->matmul(out, in, w, bias);
  }
  void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                            GradWrite write, GradWrite param_write) override {
    real_->matmul_backward(din, dw, dbias, dout, in, w, write, param_write);
  }
  void matmul_gelu_impl(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias) override {
    real_->matmul_gelu(out, pre, in, w, bias);
  }
  void matmul_backward_gelu_impl(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                                 Tensor w, Tensor pre, GradWrite param_write) override {
    real_->matmul_backward_gelu(dpre, dw, dbias, dout, in, w, pre, param_write);
  }
  void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                      Tensor b) override {
    real_->layernorm(out, mean, rstd, in, w, b);
  }
  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor mean, Tensor rstd, GradWrite param_write) override {
    real_->layernorm_backward(din, dw, db, dout, in, w, mean, rstd, param_write);
  }
  void residual_layernorm_impl(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x, Tensor y,
                               Tensor w, Tensor b) override {
    real_->residual_layernorm(sum, out, mean, rstd, x, y, w, b);
  }
  void residual_rmsnorm_impl(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y,
                             Tensor w) override {
    real_->residual_rmsnorm(sum, out, rstd, x, y, w);
  }
  void gelu_impl(Tensor out, Tensor in) override { real_->gelu(out, in); }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    real_->gelu_backward(din, dout, in, write);
  }
  void relu_impl(Tensor out, Tensor in) override { real_->relu(out, in); }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    real_->relu_backward(din, dout, in, write);
  }
  void dropout_impl(Tensor out, Tensor in, float p, uint64_t seed) override {
    real_->dropout(out, in, p, seed);
  }
  void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t seed) override {
    real_->dropout_backward(din, dout, p, seed);
  }
  void add_impl(Tensor out, Tensor a, Tensor b) override { real_->add(out, a, b); }
  void accumulate_impl(Tensor dst, Tensor src) override { real_->accumulate(dst, src); }
  void scale_impl(Tensor x, double s) override { real_->scale(x, s); }
  void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                      Tensor doc_start) override {
    real_->attention(out, lse, qkv, n_head, n_kv_head, doc_start);
  }
  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int n_head, int n_kv_head, Tensor doc_start,
                               GradWrite write) override {
    real_->attention_backward(dqkv, dout, qkv, out, lse, n_head, n_kv_head, doc_start, write);
  }
  void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) override {
    real_->rmsnorm(out, rstd, in, w);
  }
  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                             GradWrite param_write) override {
    real_->rmsnorm_backward(din, dw, dout, in, w, rstd, param_write);
  }
  void rope_impl(Tensor out, Tensor in, int n_head, int n_kv_head, float theta,
                 Tensor doc_start) override {
    real_->rope(out, in, n_head, n_kv_head, theta, doc_start);
  }
  void rope_backward_impl(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                          Tensor doc_start, GradWrite write) override {
    real_->rope_backward(din, dout, n_head, n_kv_head, theta, doc_start, write);
  }
  void swiglu_impl(Tensor out, Tensor in) override { real_->swiglu(out, in); }
  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    real_->swiglu_backward(din, dout, in, write);
  }
  void embedding_impl(Tensor out, Tensor ids, Tensor table) override {
    real_->embedding(out, ids, table);
  }
  void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) override {
    real_->embedding_backward(dtable, dout, ids);
  }
  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    real_->cross_entropy(losses, lse, logits, targets);
  }
  void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   float scale) override {
    real_->cross_entropy_backward(dlogits, logits, lse, targets, scale);
  }
  void cross_entropy_fused_impl(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                Tensor targets, float scale) override {
    real_->cross_entropy_fused(losses, lse, dlogits, logits, targets, scale);
  }
  double sum_impl(Tensor x, bool squares) override;
  void sum_to_impl(Tensor out, Tensor x) override { real_->sum_to(out, x); }
  void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    real_->adamw(param, grad, m, v, hp);
  }
  void adamw_runs_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                       const std::vector<AdamWRun>& runs) override {
    real_->adamw_runs(param, grad, m, v, hp, runs);
  }

  // Observed ops are timed on the host and told at report_op_times, in call order, as a device
  // backend's are: so timing an op never calls synchronize(), which inf leaves to the trainer.
  bool op_time_begin() override;
  void op_time_end(Op op) override;
  void report_op_times_impl(OpObserver& o) override;

 private:
  struct TimedOp {
    Op op;
    double t0, t1;
  };
  std::unique_ptr<Backend> real_;
  Faults& faults_;
  std::optional<StateBuffers> state_;
  int64_t step_ = 0;  // 0: before the first step, which no fault names
  double op_t0_ = 0;
  std::vector<TimedOp> timed_;
};

}  // namespace trainrun
