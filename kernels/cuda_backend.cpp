// CudaBackend: the Backend op set on one NVIDIA GPU. Backend's public methods have validated every
// call (src/backend/backend.cpp); this file dispatches to the kernel files (launch.h) and to
// cuBLASLt (matmul.h), and owns the device state they share (scratch buffer, id flag).
//
// Streams: every op runs on the legacy default stream, in call order, so ops need no events
// between them and cudaMemcpy-based copies are ordered with them for free. The NCCL
// communicator (nccl_comm.cpp) runs collectives on its own stream and orders itself against the
// default stream with events. Calls return without waiting for the GPU, except copy() to the
// host, sum() and sum_squares(), which return host data, the four ops that read token ids (see
// check_ids), and synchronize().
//
// dtypes (supports()): f32 everywhere; bf16 activations (f32 accumulation inside) for every op
// except adamw (f32 parameter state), with parameter gradients in bf16 or f32 (mixed precision;
// embedding_backward's table gradient is f32 only). f64 is refused: it exists for CPU gradient
// checks only. CUDA failures throw DeviceError.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "gpu_binding.h"
#include "launch.h"
#include "matmul.h"
#include "op_events.h"
#include "plugin_api.h"
#include "trainrun/backend/backend.h"
#include "trainrun/core/errors.h"

namespace trainrun::cuda {
namespace {

int select_device(int ordinal) {
  cuda_check(cudaSetDevice(ordinal), "cudaSetDevice");
  return ordinal;
}

class CudaBackend final : public Backend {
 public:
  // The device is selected in the initialiser so gemm_ (cuBLASLt) is created on it.
  explicit CudaBackend(int ordinal) : ordinal_(select_device(ordinal)) {
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.0f GiB",
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    describe_ = "cuda:" + std::to_string(ordinal_) + " (" + prop.name + ", sm_" +
                std::to_string(prop.major) + std::to_string(prop.minor) + ", " + mem +
                ", cuBLASLt, " + gpu_identity(ordinal_) + ")";
    cuda_check(cudaMalloc(&bad_id_, sizeof(*bad_id_) * kIdChecks), "cudaMalloc (id flags)");
    cuda_check(cudaMemset(bad_id_, 0xFF, sizeof(*bad_id_) * kIdChecks), "cudaMemset (id flags)");
  }
  ~CudaBackend() override {
    cudaSetDevice(ordinal_);
    if (scratch_) cudaFree(scratch_);
    if (runs_) cudaFree(runs_);
    cudaFree(bad_id_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda; }
  std::string describe() const override { return describe_; }
  bool supports(Op op, DType dt) const override {
    switch (op) {
      case Op::copy:
      case Op::fill:
        return true;
      case Op::adamw:  // f32 master weights and moments
        return dt == DType::f32;
      default:
        return dt == DType::f32 || dt == DType::bf16;
    }
  }
  int64_t max_head_dim() const override { return kAttentionMaxHeadDim; }
  // Mixed precision: the parameter-gradient outputs of matmul, layernorm and rmsnorm backward
  // may be f32 beside bf16 activations (the weight GEMM writes an f32 C from bf16 A and B, the
  // column sums finish in f32), and embedding_backward's table gradient is always f32.
  bool f32_param_grads_with_bf16() const override { return true; }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    on_device();
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the (non-sticky) allocation error
      throw DeviceError("cudaMalloc(" + std::to_string(bytes) + " bytes) on " + describe_ +
                        " failed: " + cudaGetErrorString(e) +
                        " (lower the micro-batch size or sequence length)");
    }
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    on_device();
    cuda_check(cudaFree(p), "cudaFree");
  }
  double device_memory_in_use() const override {
    on_device();
    size_t free = 0, total = 0;
    cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return static_cast<double>(total - free);
  }
  // NVTX ranges (header-only NVTX 3: nothing to link; a no-op unless a profiler is attached).
  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }

  void synchronize() override {
    on_device();
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an earlier kernel failed)");
    check_ids();
  }

 protected:
  // Observed ops are timed by events on the device (op_events.h), not by a wait after each.
  bool op_time_begin() override {
    on_device();
    op_events_.begin();
    return true;
  }
  void op_time_end(Op op) override {
    on_device();
    op_events_.end(op);
  }
  void report_op_times_impl(OpObserver& o) override {
    on_device();
    op_events_.report(o);
  }

  // Any two of host and device (cudaMemcpy infers the direction from the pointers).
  void copy_impl(Tensor dst, Tensor src) override {
    if (dst.device == Device::cpu && src.device == Device::cpu) {
      std::memmove(dst.data, src.data, dst.bytes());
      return;
    }
    on_device();
    cuda_check(cudaMemcpy(dst.data, src.data, dst.bytes(), cudaMemcpyDefault), "cudaMemcpy");
    if (dst.device == Device::cpu) check_ids();  // the host waited anyway
  }
  void cast_impl(Tensor dst, Tensor src) override {
    on_device();
    cuda::cast(dst.dtype, dst.data, src.dtype, src.data, src.numel());
  }
  void fill_impl(Tensor x, double value) override {
    on_device();
    cuda::fill(x.dtype, x.data, value, x.numel());
  }

  // ---- dense ----
  void matmul_impl(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    on_device();
    gemm_.forward(in.dtype, out.data, in.data, w.data, bias.empty() ? nullptr : bias.data,
                  in.rows(), in.cols(), w.rows());
  }

  void matmul_backward_impl(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in, Tensor w,
                            GradWrite write, GradWrite param_write) override {
    on_device();
    const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
    const bool param_acc = param_write == GradWrite::accumulate;
    gemm_.backward(in.dtype, dw.dtype, din.empty() ? nullptr : din.data,
                   dw.empty() ? nullptr : dw.data, dout.data, in.data, w.data, N, C, OC,
                   write == GradWrite::accumulate, param_acc);
    if (!dbias.empty())
      cuda::colsum(in.dtype, dbias.dtype, dbias.data, dout.data, N, OC,
                   scratch(colsum_scratch_bytes(N, OC)), param_acc);
    zero_sums_of_no_rows(N, param_write, {dw, dbias});
  }

  // The GELU epilogues where cuBLASLt's layout rules hold (Gemm says), else the unfused ops.
  void matmul_gelu_impl(Tensor out, Tensor pre, Tensor in, Tensor w, Tensor bias) override {
    on_device();
    if (!gemm_.forward_gelu(in.dtype, out.data, pre.data, in.data, w.data,
                            bias.empty() ? nullptr : bias.data, in.rows(), in.cols(), w.rows()))
      Backend::matmul_gelu_impl(out, pre, in, w, bias);
  }

  void matmul_backward_gelu_impl(Tensor dpre, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                                 Tensor w, Tensor pre, GradWrite param_write) override {
    on_device();
    if (!gemm_.backward_dgelu(in.dtype, dpre.data, dout.data, w.data, pre.data, in.rows(),
                              in.cols(), w.rows())) {
      Backend::matmul_backward_gelu_impl(dpre, dw, dbias, dout, in, w, pre, param_write);
      return;
    }
    matmul_backward_impl(Tensor{}, dw, dbias, dout, in, w, GradWrite::accumulate, param_write);
  }

  // ---- normalisation and activations ----
  void layernorm_impl(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w,
                      Tensor b) override {
    on_device();
    cuda::layernorm_forward(in.dtype, mean.dtype, out.data, mean.data, rstd.data, nullptr, in.data,
                            nullptr, w.data, b.data, in.rows(), in.cols());
  }
  void residual_layernorm_impl(Tensor sum, Tensor out, Tensor mean, Tensor rstd, Tensor x, Tensor y,
                               Tensor w, Tensor b) override {
    on_device();
    cuda::layernorm_forward(x.dtype, mean.dtype, out.data, mean.data, rstd.data, sum.data, x.data,
                            y.data, w.data, b.data, sum.rows(), sum.cols());
  }

  void layernorm_backward_impl(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                               Tensor mean, Tensor rstd, GradWrite param_write) override {
    on_device();
    const int64_t rows = in.rows(), C = in.cols();
    cuda::layernorm_backward(in.dtype, mean.dtype, dw.dtype, din.data, dw.data, db.data, dout.data,
                             in.data, w.data, mean.data, rstd.data, rows, C,
                             scratch(layernorm_backward_scratch_bytes(rows, C)),
                             param_write == GradWrite::accumulate);
    zero_sums_of_no_rows(rows, param_write, {dw, db});
  }

  void rmsnorm_impl(Tensor out, Tensor rstd, Tensor in, Tensor w) override {
    on_device();
    cuda::rmsnorm_forward(in.dtype, rstd.dtype, out.data, rstd.data, nullptr, in.data, nullptr,
                          w.data, in.rows(), in.cols());
  }
  void residual_rmsnorm_impl(Tensor sum, Tensor out, Tensor rstd, Tensor x, Tensor y,
                             Tensor w) override {
    on_device();
    cuda::rmsnorm_forward(x.dtype, rstd.dtype, out.data, rstd.data, sum.data, x.data, y.data,
                          w.data, sum.rows(), sum.cols());
  }

  void rmsnorm_backward_impl(Tensor din, Tensor dw, Tensor dout, Tensor in, Tensor w, Tensor rstd,
                             GradWrite param_write) override {
    on_device();
    const int64_t rows = in.rows(), C = in.cols();
    cuda::rmsnorm_backward(in.dtype, rstd.dtype, dw.dtype, din.data, dw.data, dout.data, in.data,
                           w.data, rstd.data, rows, C,
                           scratch(rmsnorm_backward_scratch_bytes(rows, C)),
                           param_write == GradWrite::accumulate);
    zero_sums_of_no_rows(rows, param_write, {dw});
  }

  void gelu_impl(Tensor out, Tensor in) override {
    on_device();
    cuda::gelu_forward(in.dtype, out.data, in.data, in.numel());
  }
  void gelu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    on_device();
    cuda::gelu_backward(in.dtype, din.data, dout.data, in.data, in.numel(),
                        write == GradWrite::accumulate);
  }
  void relu_impl(Tensor out, Tensor in) override {
    on_device();
    cuda::relu_forward(in.dtype, out.data, in.data, in.numel());
  }
  void relu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    on_device();
    cuda::relu_backward(in.dtype, din.data, dout.data, in.data, in.numel(),
                        write == GradWrite::accumulate);
  }
  void dropout_impl(Tensor out, Tensor in, float p, uint64_t seed) override {
    on_device();
    cuda::dropout_forward(in.dtype, out.data, in.data, in.numel(), p, seed);
  }
  void dropout_backward_impl(Tensor din, Tensor dout, float p, uint64_t seed) override {
    on_device();
    cuda::dropout_backward(din.dtype, din.data, dout.data, dout.numel(), p, seed);
  }

  // ---- elementwise ----
  void add_impl(Tensor out, Tensor a, Tensor b) override {
    on_device();
    cuda::add(out.dtype, out.data, a.data, b.data, out.numel());
  }
  void accumulate_impl(Tensor dst, Tensor src) override {
    on_device();
    cuda::accumulate(dst.dtype, dst.data, src.data, dst.numel());
  }
  void scale_impl(Tensor x, double s) override {
    on_device();
    cuda::scale(x.dtype, x.data, s, x.numel());
  }

  // ---- attention ----
  void attention_impl(Tensor out, Tensor lse, Tensor qkv, int n_head, int n_kv_head,
                      Tensor doc_start) override {
    on_device();
    cuda::attention_forward(qkv.dtype, lse.dtype, out.data, lse.data, qkv.data, qkv.dim(0),
                            qkv.dim(1), head_dim(qkv, n_head, n_kv_head), n_head, n_kv_head,
                            starts(doc_start));
  }

  void attention_backward_impl(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int n_head, int n_kv_head, Tensor doc_start,
                               GradWrite write) override {
    on_device();
    const int64_t B = qkv.dim(0), T = qkv.dim(1);
    cuda::attention_backward(qkv.dtype, lse.dtype, dqkv.data, dout.data, qkv.data, out.data,
                             lse.data, B, T, head_dim(qkv, n_head, n_kv_head), n_head, n_kv_head,
                             starts(doc_start), write == GradWrite::accumulate,
                             scratch(attention_backward_scratch_bytes(B, T, n_head)));
  }

  void rope_impl(Tensor out, Tensor in, int n_head, int n_kv_head, float theta,
                 Tensor doc_start) override {
    on_device();
    cuda::rope_forward(in.dtype, out.data, in.data, in.dim(0), in.dim(1), n_head, n_kv_head,
                       head_dim(in, n_head, n_kv_head), theta, starts(doc_start));
  }
  void rope_backward_impl(Tensor din, Tensor dout, int n_head, int n_kv_head, float theta,
                          Tensor doc_start, GradWrite write) override {
    on_device();
    cuda::rope_backward(din.dtype, din.data, dout.data, din.dim(0), din.dim(1), n_head, n_kv_head,
                        head_dim(din, n_head, n_kv_head), theta, starts(doc_start),
                        write == GradWrite::accumulate);
  }
  static const int32_t* starts(const Tensor& doc_start) {
    return doc_start.empty() ? nullptr : doc_start.as<int32_t>();
  }

  // ---- gated MLP ----
  void swiglu_impl(Tensor out, Tensor in) override {
    on_device();
    cuda::swiglu_forward(in.dtype, out.data, in.data, out.rows(), out.cols());
  }
  void swiglu_backward_impl(Tensor din, Tensor dout, Tensor in, GradWrite write) override {
    on_device();
    cuda::swiglu_backward(in.dtype, din.data, dout.data, in.data, dout.rows(), dout.cols(),
                          write == GradWrite::accumulate);
  }

  // ---- embedding and loss: the ops that read token ids ----
  void embedding_impl(Tensor out, Tensor ids, Tensor table) override {
    on_device();
    cuda::embedding_forward(out.dtype, out.data, ids.as<int32_t>(), table.data, out.rows(),
                            out.cols(), table.rows(), id_flag(Op::embedding, "ids", table.rows()));
  }

  void embedding_backward_impl(Tensor dtable, Tensor dout, Tensor ids) override {
    on_device();
    if (dtable.dtype != DType::f32)
      throw DeviceError(std::string("embedding_backward: the CUDA backend accumulates the table "
                                    "gradient with f32 atomics; pass an f32 dtable, got ") +
                        dtype_name(dtable.dtype));
    cuda::embedding_backward(dout.dtype, dtable.data, dout.data, ids.as<int32_t>(), dout.rows(),
                             dout.cols(), dtable.rows(),
                             id_flag(Op::embedding_backward, "ids", dtable.rows()));
  }

  void cross_entropy_impl(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    on_device();
    cuda::cross_entropy_forward(logits.dtype, lse.dtype, losses.data, lse.data, logits.data,
                                targets.as<int32_t>(), logits.rows(), logits.cols(),
                                id_flag(Op::cross_entropy, "targets", logits.cols()));
  }

  void cross_entropy_fused_impl(Tensor losses, Tensor lse, Tensor dlogits, Tensor logits,
                                Tensor targets, float scale) override {
    on_device();
    cuda::cross_entropy_fused(logits.dtype, lse.dtype, losses.data, lse.data, dlogits.data,
                              logits.data, targets.as<int32_t>(), logits.rows(), logits.cols(),
                              scale, id_flag(Op::cross_entropy, "targets", logits.cols()));
  }

  void cross_entropy_backward_impl(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                   float scale) override {
    on_device();
    cuda::cross_entropy_backward(logits.dtype, lse.dtype, dlogits.data, logits.data, lse.data,
                                 targets.as<int32_t>(), logits.rows(), logits.cols(), scale,
                                 id_flag(Op::cross_entropy_backward, "targets", logits.cols()));
  }

  // ---- reductions and optimizer ----
  double sum_impl(Tensor x, bool squares) override {
    on_device();
    const double s =
        cuda::sum(x.dtype, x.data, x.numel(), squares, scratch(reduce_scratch_bytes()));
    check_ids();  // the result came back to the host: the flags are one more small copy
    return s;
  }

  void sum_to_impl(Tensor out, Tensor x) override {
    on_device();
    cuda::sum_to(x.dtype, x.data, x.numel(), false, scratch(reduce_scratch_bytes()),
                 out.as<double>());
  }

  void adamw_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    on_device();
    cuda::adamw(param.as<float>(), grad.as<float>(), m.as<float>(), v.as<float>(), param.numel(),
                AdamWStep<float>::make(hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.step,
                                       hp.grad_scale));
  }

  void adamw_runs_impl(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp,
                       const std::vector<AdamWRun>& runs) override {
    on_device();
    const int count = upload_runs(runs);
    if (count == 0) return;
    const int64_t n = runs_host_.back().end;
    auto step = [&](double wd) {
      return AdamWStep<float>::make(hp.lr, hp.beta1, hp.beta2, hp.eps, wd, hp.step, hp.grad_scale);
    };
    cuda::adamw_runs(param.as<float>(), grad.as<float>(), m.as<float>(), v.as<float>(), runs_,
                     count, n, step(hp.weight_decay), step(0.0));
  }

 private:
  // The CUDA runtime's current device is per host thread; the trainer, the checkpoint writer and
  // the communicator may call from different threads.
  void on_device() const { cuda_check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

  // GradWrite::overwrite is the kernels' own (GEMM beta 0, store_grad): no gradient is zeroed
  // first. A parameter gradient summed over no rows is the one case no kernel writes: zeros.
  void zero_sums_of_no_rows(int64_t rows, GradWrite write, std::initializer_list<Tensor> sums) {
    if (rows != 0 || write != GradWrite::overwrite) return;
    for (const Tensor& t : sums)
      if (!t.empty()) fill_impl(t, 0.0);
  }

  // Token ids live on the device, so the host cannot check them before the kernel as the CPU
  // does. Each kernel that reads ids gets a flag of its own (id_flag) in which it records the
  // first position whose id is outside [0, V), with the id (launch.h), and it never reads out of
  // bounds. The flags are read back together, in one copy, at the next point where the host
  // waits for the GPU anyway (a reduction's result, a copy to the host, synchronize()), or when
  // all kIdChecks are in use; then the CPU's DataError is raised for the first op that flagged.
  // So the step loop never waits for the GPU just to check ids (it used to, four times a
  // micro-batch), and the check still holds for ids from any source.
  static constexpr int kIdChecks = 16;
  struct IdCheck {
    Op op;
    const char* name;
    int64_t limit;
  };
  unsigned long long* id_flag(Op op, const char* name, int64_t limit) {
    if (static_cast<int>(pending_.size()) == kIdChecks) check_ids();
    pending_.push_back({op, name, limit});
    return bad_id_ + (pending_.size() - 1);
  }
  void check_ids() {
    if (pending_.empty()) return;
    unsigned long long flags[kIdChecks];
    const size_t n = pending_.size();
    cuda_check(cudaMemcpy(flags, bad_id_, sizeof(flags[0]) * n, cudaMemcpyDeviceToHost),
               "cudaMemcpy (token id flags; an earlier kernel may have failed)");
    std::vector<IdCheck> checked;
    checked.swap(pending_);
    for (size_t i = 0; i < n; ++i) {
      if (flags[i] == kNoBadId) continue;
      // Re-arm before raising, so the backend stays usable after the error.
      cuda_check(cudaMemset(bad_id_, 0xFF, sizeof(*bad_id_) * n), "cudaMemset (id flags)");
      fail_out_of_range_id(checked[i].op, checked[i].name, bad_id_position(flags[i]),
                           bad_id_value(flags[i]), checked[i].limit);
    }
  }

  // One growable device buffer for the two-pass reductions and attention's D. Grown rarely (the
  // first steps see the largest shapes); cudaFree waits for queued kernels that still use it.
  void* scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return scratch_;
    if (scratch_) cuda_check(cudaFree(scratch_), "cudaFree (scratch)");
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    cuda_check(cudaMalloc(&scratch_, bytes), "cudaMalloc (scratch)");
    scratch_bytes_ = bytes;
    return scratch_;
  }

  // adamw_runs' table in device memory. The optimizer passes the same runs every step, so it is
  // copied only when it differs from the last one. Returns the number of non-empty runs.
  int upload_runs(const std::vector<AdamWRun>& runs) {
    std::vector<AdamWRunDevice> t;
    for (const AdamWRun& r : runs)
      if (r.n > 0) t.push_back({r.begin, r.begin + r.n, r.decay ? 1 : 0});
    const bool same = t.size() == runs_host_.size() &&
                      std::equal(t.begin(), t.end(), runs_host_.begin(), [](auto& a, auto& b) {
                        return a.begin == b.begin && a.end == b.end && a.decay == b.decay;
                      });
    if (same) return static_cast<int>(t.size());
    if (t.size() > runs_capacity_) {
      if (runs_) cuda_check(cudaFree(runs_), "cudaFree (adamw runs)");
      runs_ = nullptr;
      runs_capacity_ = 0;
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&runs_), t.size() * sizeof(t[0])),
                 "cudaMalloc (adamw runs)");
      runs_capacity_ = t.size();
    }
    if (!t.empty())
      cuda_check(cudaMemcpy(runs_, t.data(), t.size() * sizeof(t[0]), cudaMemcpyHostToDevice),
                 "cudaMemcpy (adamw runs)");
    runs_host_ = std::move(t);
    return static_cast<int>(runs_host_.size());
  }

  int ordinal_;
  std::string describe_;
  Gemm gemm_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  AdamWRunDevice* runs_ = nullptr;  // adamw_runs' table (upload_runs)
  size_t runs_capacity_ = 0;
  std::vector<AdamWRunDevice> runs_host_;
  unsigned long long* bad_id_ = nullptr;  // kIdChecks flags, kNoBadId when none (id_flag)
  std::vector<IdCheck> pending_;          // the ops whose flags are not read back yet
  OpEvents op_events_;                    // observed ops' device timing
};

void set_err(char* err, size_t errlen, const std::string& msg) {
  if (!err || errlen == 0) return;
  std::snprintf(err, errlen, "%s", msg.c_str());
}

}  // namespace
}  // namespace trainrun::cuda

extern "C" {

int trainrun_cuda_abi_version() {
  return kTrainrunCudaAbiVersion;
}

trainrun::Backend* trainrun_cuda_create_backend(int local_rank, char* err, size_t errlen) {
  using trainrun::cuda::set_err;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    set_err(err, errlen,
            std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e) + " (CUDA error " +
                std::to_string(static_cast<int>(e)) +
                (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                     ? "; is an NVIDIA driver installed and a GPU visible?)"
                     : ")"));
    return nullptr;
  }
  if (count == 0) {
    set_err(err, errlen, "no CUDA devices are visible (check CUDA_VISIBLE_DEVICES)");
    return nullptr;
  }
  try {
    return new trainrun::cuda::CudaBackend(trainrun::cuda::gpu_for_local_rank(local_rank, count));
  } catch (const std::exception& ex) {
    set_err(err, errlen, ex.what());
    return nullptr;
  }
}

}  // extern "C"
