// step_kernels: the model run once on a backend that records ops instead of computing them.
#include "kernel_roofline.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "trainrun/model/model.h"
#include "trainrun/model/params.h"
#include "trainrun/plan/plan.h"

namespace trainrun {

namespace {

// The share of the peak a kernel reaches when it is not memory-bound. GEMMs: cuBLASLt on large
// bf16 shapes runs at about 80% of the dense peak (790 of 989 TFLOP/s on an H100/H200, the figure
// issue 29 sets the goal from). Attention: FlashAttention-2 reaches 35-50% of an H100's peak;
// ours follows its structure on mma.sync without TMA or wgmma, so the low end.
constexpr double kGemmEfficiency = 0.8;
constexpr double kAttentionEfficiency = 0.4;
// Streaming kernels reach about 80% of the HBM bandwidth (STREAM-like copies on H100/H200).
constexpr double kBandwidthEfficiency = 0.8;
// Between two queued kernels the GPU idles about this long (launch gap, tail of the last wave).
constexpr double kLaunchSeconds = 2e-6;

double bytes_of(std::initializer_list<const Tensor*> ts) {
  double b = 0;
  for (const Tensor* t : ts) b += static_cast<double>(t->bytes());
  return b;
}

// Records what it is asked to run. Memory is address space only (a bump pointer that is never
// dereferenced): a model of any size is "allocated" in no time and no memory.
class CostRecorder final : public Backend {
 public:
  std::vector<KernelCost> ops;
  bool recording = false;

  Device device() const override { return Device::cuda; }
  std::string describe() const override { return "kernel cost recorder"; }
  bool supports(Op, DType) const override { return true; }
  bool f32_param_grads_with_bf16() const override { return true; }
  void* alloc(size_t bytes) override {
    void* p = reinterpret_cast<void*>(next_);
    next_ += (bytes + 255) / 256 * 256 + 256;
    return p;
  }
  void release(void*) override {}

 protected:
  void copy_impl(Tensor dst, Tensor src) override { add(Op::copy, 0, bytes_of({&dst, &src})); }
  void cast_impl(Tensor dst, Tensor src) override { add(Op::cast, 0, bytes_of({&dst, &src})); }
  void fill_impl(Tensor x, double) override { add(Op::fill, 0, bytes_of({&x})); }
  void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    add(Op::matmul, 2.0 * static_cast<double>(in.rows() * in.cols() * w.rows()),
        bytes_of({&out, &in, &w, &bias}));
  }
  void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                            GradWrite, GradWrite) override {
    const double mnk = static_cast<double>(in.rows() * in.cols() * w.rows());
    add(Op::matmul_backward, 2.0 * mnk * ((din.empty() ? 0 : 1) + (dw.empty() ? 0 : 1)),
        bytes_of({&din, &dw, &dbias, &dout, &in, &w}));
  }
  // A GPU fuses the GELU into the GEMM (the epilogue also writes pre, and reads it backward).
  void matmul_gelu_impl(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias) override {
    add(Op::matmul, 2.0 * static_cast<double>(in.rows() * in.cols() * w.rows()),
        bytes_of({&out, &pre, &in, &w, &bias}));
  }
  void matmul_backward_gelu_impl(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                                 Tensor w, Tensor pre, GradWrite) override {
    const double mnk = static_cast<double>(in.rows() * in.cols() * w.rows());
    add(Op::matmul_backward, 4.0 * mnk, bytes_of({&dpre, &pre, &dw, &dbias, &dout, &in, &w}));
  }
  void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                      Tensor b) override {
    add(Op::layernorm, 0, bytes_of({&out, &mean, &rstd, &in, &w, &b}));
  }
  // A GPU folds the residual add into the norm: x and y read, sum written, then the norm's own
  // write (the sum is reread from cache, not memory).
  void residual_layernorm_impl(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x, Tensor y,
                               Tensor w, Tensor b) override {
    add(Op::layernorm, 0, bytes_of({&sum, &out, &mean, &rstd, &x, &y, &w, &b}));
  }
  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor mean, Tensor rstd, GradWrite) override {
    add(Op::layernorm_backward, 0, bytes_of({&din, &dw, &db, &dout, &in, &w, &mean, &rstd}));
  }
  void gelu_impl(Tensor out, Tensor in) override { add(Op::gelu, 0, bytes_of({&out, &in})); }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite) override {
    add(Op::gelu_backward, 0, bytes_of({&din, &dout, &in}));
  }
  void relu_impl(Tensor out, Tensor in) override { add(Op::relu, 0, bytes_of({&out, &in})); }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite) override {
    add(Op::relu_backward, 0, bytes_of({&din, &dout, &in}));
  }
  void dropout_impl(Tensor out, Tensor in, float, uint64_t) override {
    add(Op::dropout, 0, bytes_of({&out, &in}));
  }
  void dropout_backward_impl(Tensor din, Tensor dout, float, uint64_t) override {
    add(Op::dropout_backward, 0, bytes_of({&din, &dout}));
  }
  void add_impl(Tensor out, Tensor a, Tensor b) override {
    add(Op::add, 0, bytes_of({&out, &a, &b}));
  }
  void accumulate_impl(Tensor dst, Tensor src) override {
    add(Op::accumulate, 0, bytes_of({&dst, &dst, &src}));  // dst is read and written
  }
  void scale_impl(Tensor x, double) override { add(Op::scale, 0, bytes_of({&x, &x})); }
  // Causal attention computes half of each T x T product: forward QK^T and PV, backward those
  // two recomputed or transposed plus three more (dV, dP, dQ/dK), each B H T^2 hd FLOPs.
  void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                      Tensor doc_start) override {
    add(Op::attention, 2 * attention_half(qkv, n_head, n_kv_head),
        bytes_of({&out, &lse, &qkv, &doc_start}));
  }
  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int n_head, int n_kv_head, Tensor doc_start, GradWrite) override {
    add(Op::attention_backward, 5 * attention_half(qkv, n_head, n_kv_head),
        bytes_of({&dqkv, &dout, &qkv, &out, &lse, &doc_start}));
  }
  void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) override {
    add(Op::rmsnorm, 0, bytes_of({&out, &rstd, &in, &w}));
  }
  void residual_rmsnorm_impl(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y,
                             Tensor w) override {
    add(Op::rmsnorm, 0, bytes_of({&sum, &out, &rstd, &x, &y, &w}));
  }
  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                             GradWrite) override {
    add(Op::rmsnorm_backward, 0, bytes_of({&din, &dw, &dout, &in, &w, &rstd}));
  }
  void rope_impl(Tensor out, Tensor in, int, int, float, Tensor doc_start) override {
    add(Op::rope, 0, bytes_of({&out, &in, &doc_start}));
  }
  void rope_backward_impl(Tensor din, Tensor dout, int, int, float, Tensor doc_start,
                          GradWrite) override {
    add(Op::rope_backward, 0, bytes_of({&din, &dout, &doc_start}));
  }
  void swiglu_impl(Tensor out, Tensor in) override { add(Op::swiglu, 0, bytes_of({&out, &in})); }
  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite) override {
    add(Op::swiglu_backward, 0, bytes_of({&din, &dout, &in}));
  }
  void embedding_impl(Tensor out, Tensor ids, Tensor table) override {
    // The rows it gathers, not the whole table.
    add(Op::embedding, 0, 2.0 * static_cast<double>(out.bytes()) + bytes_of({&ids}));
    (void)table;
  }
  void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) override {
    add(Op::embedding_backward, 0, 2.0 * static_cast<double>(dout.bytes()) + bytes_of({&ids}));
    (void)dtable;
  }
  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    add(Op::cross_entropy, 0, bytes_of({&losses, &lse, &logits, &targets}));
  }
  void cross_entropy_fused_impl(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                Tensor targets, float) override {
    // One read of the logits from memory (the gradient pass finds the row in L2), one write.
    add(Op::cross_entropy, 0, bytes_of({&losses, &lse, &logits, &targets, &dlogits}));
  }
  void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   float) override {
    add(Op::cross_entropy_backward, 0, bytes_of({&dlogits, &logits, &lse, &targets}));
  }
  double sum_impl(Tensor x, bool squares) override {
    add(squares ? Op::sum_squares : Op::sum, 0, bytes_of({&x}));
    return 0;
  }
  void sum_to_impl(Tensor, Tensor x) override { sum_impl(x, false); }
  void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams&) override {
    // Reads all four, writes the weight and both moments.
    add(Op::adamw, 0, bytes_of({&param, &grad, &m, &v, &param, &m, &v}));
  }

 private:
  static double attention_half(const Tensor& qkv, int n_head, int n_kv_head) {
    const double T = static_cast<double>(qkv.dim(1));
    return static_cast<double>(qkv.dim(0)) * n_head * T * T *
           static_cast<double>(head_dim(qkv, n_head, n_kv_head == 0 ? n_head : n_kv_head));
  }
  void add(Op op, double flops, double bytes) {
    if (recording) ops.push_back({op, flops, bytes});
  }

  uintptr_t next_ = uintptr_t{1} << 40;
};

}  // namespace

StepKernels step_kernels(const Experiment& exp, int batch) {
  CostRecorder rec;
  const DType dt = exp.train.precision == Precision::bf16 ? DType::bf16 : DType::f32;
  // With activation checkpointing the recorded step holds the recomputed forwards too: their
  // time is in the prediction (their FLOPs are not model FLOPs, so not in MFU).
  const std::unique_ptr<Model> model =
      build_model(exp.model, rec, batch, dt, exp.train.activation_checkpointing);
  const auto n = static_cast<size_t>(batch) * static_cast<size_t>(exp.model.seq_len);
  const std::vector<int32_t> ids(n, 0);
  StepKernels out;
  rec.recording = true;
  model->set_batch(ids.data(), ids.data());
  // As the trainer calls it: the loss left on the device, its gradient fused into the forward.
  const Tensor loss_sum(rec.alloc(sizeof(double)), DType::f64, Device::cuda, {1});
  model->forward(true, 0, loss_sum, 1.0f);
  model->backward(1.0f, 0, nullptr);
  out.micro_batch.swap(rec.ops);
  // The optimizer step: the gradient norm (clipping), AdamW over the f32 masters with its two
  // moments (allocated here as the optimizer does), and the bf16 copy of the new weights.
  ParamStore& ps = model->params();
  rec.sum_squares(ps.grads());
  const int64_t p = ps.numel();
  const Tensor m(rec.alloc(static_cast<size_t>(p) * 4), DType::f32, Device::cuda, {p});
  const Tensor v(rec.alloc(static_cast<size_t>(p) * 4), DType::f32, Device::cuda, {p});
  rec.adamw(ps.params(), ps.grads(), m, v, AdamWParams{});
  ps.refresh_compute();
  out.optimizer.swap(rec.ops);
  return out;
}

double roofline_seconds(const KernelCost& k, const DevicePeak& peak) {
  const double eff = k.op == Op::matmul || k.op == Op::matmul_backward ? kGemmEfficiency
                     : k.op == Op::attention || k.op == Op::attention_backward
                         ? kAttentionEfficiency
                         : 1.0;
  return std::max(k.flops / (eff * std::max(peak.flops, 1.0)),
                  k.bytes / (kBandwidthEfficiency * std::max(peak.mem_bw, 1.0))) +
         kLaunchSeconds;
}

}  // namespace trainrun
