// CudaBackend: the Backend op set on one NVIDIA GPU. This file only checks shapes and dtypes and
// dispatches: the arithmetic is in the kernel files (launch.h) and in cuBLASLt (matmul.h).
//
// Streams: every op runs on the legacy default stream, in call order, so ops need no events
// between them and cudaMemcpy-based copies are ordered with them for free. The NCCL
// communicator (nccl_comm.cpp) runs collectives on its own stream and orders itself against the
// default stream with events. Calls return without waiting for the GPU, except copy() to the
// host, sum() and sum_squares(), which return host data, and synchronize().
//
// dtypes: f32 everywhere; bf16 activations (f32 accumulation inside) for every op except
// embedding_backward and adamw (f32 parameter state); statistics (mean/rstd, lse, losses) may be
// f32 when the activations are bf16. f64 is refused: it exists for CPU gradient checks only.
// Shape errors throw std::invalid_argument (as the CPU backend), CUDA failures DeviceError.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "launch.h"
#include "matmul.h"
#include "plugin_api.h"
#include "trainrun/backend.h"
#include "trainrun/errors.h"

namespace trainrun::cuda {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(std::string(what) + ": " + cudaGetErrorString(e) + " (CUDA error " +
                      std::to_string(static_cast<int>(e)) + ")");
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

using Named = std::pair<const char*, const Tensor*>;

// Every named tensor present and on the GPU; returns the shared dtype of the float ones.
DType check_floats(const char* op, std::initializer_list<Named> ts) {
  bool seen = false;
  DType dt = DType::f32;
  for (const auto& [name, t] : ts) {
    require(!t->empty(), op, std::string(name) + " is empty");
    require(t->device == Device::cuda, op,
            std::string(name) +
                " is on the cpu; the CUDA backend works on device tensors (copy "
                "it with Backend::copy first)");
    require(t->dtype != DType::i32, op, std::string(name) + " is i32, expected a float tensor");
    if (!seen) {
      dt = t->dtype;
      seen = true;
    }
    require(t->dtype == dt, op,
            std::string(name) + " is " + dtype_name(t->dtype) + " but the others are " +
                dtype_name(dt));
  }
  return dt;
}

// Saved statistics: on the GPU, f32 or the activation dtype, all alike.
DType check_stats(const char* op, DType dt, std::initializer_list<Named> ts) {
  DType st = dt;
  bool seen = false;
  for (const auto& [name, t] : ts) {
    require(!t->empty() && t->device == Device::cuda, op,
            std::string(name) + " must be a device tensor");
    require(t->dtype == DType::f32 || t->dtype == dt, op,
            std::string(name) + " must be f32 or " + dtype_name(dt));
    if (!seen) st = t->dtype;
    seen = true;
    require(t->dtype == st, op, "saved statistics must share one dtype");
  }
  return st;
}

void check_ids(const char* op, const char* name, const Tensor& t) {
  require(!t.empty() && t.device == Device::cuda && t.dtype == DType::i32, op,
          std::string(name) + " must be an i32 device tensor");
}

std::string shapes(std::initializer_list<Named> ts) {
  std::string s;
  for (const auto& [name, t] : ts)
    s += std::string(s.empty() ? "" : " ") + name + " " + t->shape_str();
  return s;
}

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
                ", cuBLASLt)";
  }
  ~CudaBackend() override {
    cudaSetDevice(ordinal_);
    if (scratch_) cudaFree(scratch_);
  }

  Device device() const override { return Device::cuda; }
  std::string describe() const override { return describe_; }

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

  // Equal bytes: a raw copy between any two of host and device (cudaMemcpy infers the direction
  // from the pointers). Different float dtypes with equal element counts, both on the device:
  // an f32 <-> bf16 cast.
  void copy(Tensor dst, Tensor src) override {
    on_device();
    const char* op = "copy";
    if (dst.dtype != src.dtype && dst.numel() == src.numel() && dst.numel() > 0 &&
        dst.device == Device::cuda && src.device == Device::cuda) {
      require((dst.dtype == DType::f32 || dst.dtype == DType::bf16) &&
                  (src.dtype == DType::f32 || src.dtype == DType::bf16),
              op,
              std::string("cannot cast ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype) +
                  " on the GPU (f32 <-> bf16 only)");
      cuda::cast(dst.dtype, dst.data, src.dtype, src.data, src.numel());
      return;
    }
    require(dst.bytes() == src.bytes(), op,
            "dst " + dst.shape_str() + " " + dtype_name(dst.dtype) + " and src " + src.shape_str() +
                " " + dtype_name(src.dtype) +
                " differ in size (a cast needs both on the device and equal element counts)");
    if (dst.bytes() == 0 || dst.data == src.data) return;
    if (dst.device == Device::cpu && src.device == Device::cpu) {
      std::memmove(dst.data, src.data, dst.bytes());
      return;
    }
    cuda_check(cudaMemcpy(dst.data, src.data, dst.bytes(), cudaMemcpyDefault), "cudaMemcpy");
  }

  void fill(Tensor x, double value) override {
    on_device();
    require(!x.empty() && x.device == Device::cuda, "fill", "x must be a device tensor");
    cuda::fill(x.dtype, x.data, value, x.numel());
  }

  void synchronize() override {
    on_device();
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (an earlier kernel failed)");
  }

  // ---- dense ----
  void matmul(Tensor out, Tensor in, Tensor w, Tensor bias) override {
    const char* op = "matmul";
    on_device();
    const DType dt =
        bias.empty() ? check_floats(op, {{"out", &out}, {"in", &in}, {"w", &w}})
                     : check_floats(op, {{"out", &out}, {"in", &in}, {"w", &w}, {"bias", &bias}});
    const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
    require(w.cols() == C && out.rows() == N && out.cols() == OC &&
                (bias.empty() || bias.numel() == OC),
            op,
            shapes({{"out", &out}, {"in", &in}, {"w", &w}, {"bias", &bias}}) +
                ": expected out [N,OC], in [N,C], w [OC,C], bias [OC]");
    gemm_.forward(dt, out.data, in.data, w.data, bias.empty() ? nullptr : bias.data, N, C, OC);
  }

  void matmul_backward(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                       Tensor w) override {
    const char* op = "matmul_backward";
    on_device();
    const DType dt = check_floats(op, {{"dw", &dw}, {"dout", &dout}, {"in", &in}, {"w", &w}});
    if (!din.empty()) require(check_floats(op, {{"din", &din}}) == dt, op, "din dtype differs");
    if (!dbias.empty())
      require(check_floats(op, {{"dbias", &dbias}}) == dt, op, "dbias dtype differs");
    const int64_t N = in.rows(), C = in.cols(), OC = w.rows();
    require(w.cols() == C && dw.rows() == OC && dw.cols() == C && dout.rows() == N &&
                dout.cols() == OC && (din.empty() || din.numel() == in.numel()) &&
                (dbias.empty() || dbias.numel() == OC),
            op,
            shapes({{"din", &din},
                    {"dw", &dw},
                    {"dbias", &dbias},
                    {"dout", &dout},
                    {"in", &in},
                    {"w", &w}}) +
                ": expected din like in [N,C], dw like w [OC,C], dbias [OC], dout [N,OC]");
    gemm_.backward(dt, din.empty() ? nullptr : din.data, dw.data, dout.data, in.data, w.data, N, C,
                   OC);
    if (!dbias.empty())
      cuda::colsum_accumulate(dt, dbias.data, dout.data, N, OC,
                              scratch(colsum_scratch_bytes(N, OC)));
  }

  // ---- normalisation and activations ----
  void layernorm(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w, Tensor b) override {
    const char* op = "layernorm";
    on_device();
    const DType dt = check_floats(op, {{"out", &out}, {"in", &in}, {"w", &w}, {"b", &b}});
    const DType st = check_stats(op, dt, {{"mean", &mean}, {"rstd", &rstd}});
    const int64_t rows = in.rows(), C = in.cols();
    require(
        out.numel() == in.numel() && out.cols() == C && w.numel() == C && b.numel() == C &&
            mean.numel() == rows && rstd.numel() == rows,
        op,
        shapes(
            {{"out", &out}, {"mean", &mean}, {"rstd", &rstd}, {"in", &in}, {"w", &w}, {"b", &b}}) +
            ": expected out like in [rows,C], mean/rstd [rows], w/b [C]");
    cuda::layernorm_forward(dt, st, out.data, mean.data, rstd.data, in.data, w.data, b.data, rows,
                            C);
  }

  void layernorm_backward(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in, Tensor w,
                          Tensor mean, Tensor rstd) override {
    const char* op = "layernorm_backward";
    on_device();
    const DType dt = check_floats(
        op, {{"din", &din}, {"dw", &dw}, {"db", &db}, {"dout", &dout}, {"in", &in}, {"w", &w}});
    const DType st = check_stats(op, dt, {{"mean", &mean}, {"rstd", &rstd}});
    const int64_t rows = in.rows(), C = in.cols();
    require(din.numel() == in.numel() && dout.numel() == in.numel() && w.numel() == C &&
                dw.numel() == C && db.numel() == C && mean.numel() == rows && rstd.numel() == rows,
            op,
            shapes({{"din", &din},
                    {"dw", &dw},
                    {"db", &db},
                    {"dout", &dout},
                    {"in", &in},
                    {"w", &w},
                    {"mean", &mean},
                    {"rstd", &rstd}}) +
                ": expected din/dout like in [rows,C], w/dw/db [C], mean/rstd [rows]");
    cuda::layernorm_backward(dt, st, din.data, dw.data, db.data, dout.data, in.data, w.data,
                             mean.data, rstd.data, rows, C,
                             scratch(layernorm_backward_scratch_bytes(rows, C)));
  }

  void gelu(Tensor out, Tensor in) override {
    const DType dt = pointwise("gelu", {{"out", &out}, {"in", &in}});
    cuda::gelu_forward(dt, out.data, in.data, in.numel());
  }
  void gelu_backward(Tensor din, Tensor dout, Tensor in) override {
    const DType dt = pointwise("gelu_backward", {{"din", &din}, {"dout", &dout}, {"in", &in}});
    cuda::gelu_backward(dt, din.data, dout.data, in.data, in.numel());
  }
  void relu(Tensor out, Tensor in) override {
    const DType dt = pointwise("relu", {{"out", &out}, {"in", &in}});
    cuda::relu_forward(dt, out.data, in.data, in.numel());
  }
  void relu_backward(Tensor din, Tensor dout, Tensor in) override {
    const DType dt = pointwise("relu_backward", {{"din", &din}, {"dout", &dout}, {"in", &in}});
    cuda::relu_backward(dt, din.data, dout.data, in.data, in.numel());
  }
  void dropout(Tensor out, Tensor in, float p, uint64_t seed) override {
    const DType dt = pointwise("dropout", {{"out", &out}, {"in", &in}});
    check_p("dropout", p);
    cuda::dropout_forward(dt, out.data, in.data, in.numel(), p, seed);
  }
  void dropout_backward(Tensor din, Tensor dout, float p, uint64_t seed) override {
    const DType dt = pointwise("dropout_backward", {{"din", &din}, {"dout", &dout}});
    check_p("dropout_backward", p);
    cuda::dropout_backward(dt, din.data, dout.data, dout.numel(), p, seed);
  }

  // ---- elementwise ----
  void add(Tensor out, Tensor a, Tensor b) override {
    const DType dt = pointwise("add", {{"out", &out}, {"a", &a}, {"b", &b}});
    cuda::add(dt, out.data, a.data, b.data, out.numel());
  }
  void accumulate(Tensor dst, Tensor src) override {
    const DType dt = pointwise("accumulate", {{"dst", &dst}, {"src", &src}});
    cuda::accumulate(dt, dst.data, src.data, dst.numel());
  }
  void scale(Tensor x, double s) override {
    const DType dt = pointwise("scale", {{"x", &x}});
    cuda::scale(dt, x.data, s, x.numel());
  }

  // ---- attention ----
  void attention(Tensor out, Tensor lse, Tensor qkv, int n_head) override {
    const char* op = "attention";
    on_device();
    const DType dt = check_floats(op, {{"out", &out}, {"qkv", &qkv}});
    const DType st = check_stats(op, dt, {{"lse", &lse}});
    const auto [B, T, C] = attention_dims(op, qkv, n_head);
    require(out.numel() == B * T * C && out.cols() == C && lse.numel() == B * n_head * T, op,
            shapes({{"out", &out}, {"lse", &lse}, {"qkv", &qkv}}) +
                ": expected out [B,T,C], lse [B,NH,T] for qkv [B,T,3C]");
    cuda::attention_forward(dt, st, out.data, lse.data, qkv.data, B, T, C, n_head);
  }

  void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          int n_head) override {
    const char* op = "attention_backward";
    on_device();
    const DType dt =
        check_floats(op, {{"dqkv", &dqkv}, {"dout", &dout}, {"qkv", &qkv}, {"out", &out}});
    const DType st = check_stats(op, dt, {{"lse", &lse}});
    const auto [B, T, C] = attention_dims(op, qkv, n_head);
    require(
        dqkv.numel() == qkv.numel() && dout.numel() == B * T * C && out.numel() == B * T * C &&
            lse.numel() == B * n_head * T,
        op,
        shapes({{"dqkv", &dqkv}, {"dout", &dout}, {"qkv", &qkv}, {"out", &out}, {"lse", &lse}}) +
            ": expected dqkv like qkv [B,T,3C], dout/out [B,T,C], lse [B,NH,T]");
    cuda::attention_backward(dt, st, dqkv.data, dout.data, qkv.data, out.data, lse.data, B, T, C,
                             n_head, scratch(attention_backward_scratch_bytes(B, T, n_head)));
  }

  // ---- embedding ----
  void embedding(Tensor out, Tensor ids, Tensor table) override {
    const char* op = "embedding";
    on_device();
    const DType dt = check_floats(op, {{"out", &out}, {"table", &table}});
    check_ids(op, "ids", ids);
    const int64_t N = ids.numel(), V = table.rows(), C = table.cols();
    require(out.rows() == N && out.cols() == C, op,
            shapes({{"out", &out}, {"ids", &ids}, {"table", &table}}) +
                ": expected out [N,C] for ids [N] and table [V,C]");
    cuda::embedding_forward(dt, out.data, ids.as<int32_t>(), table.data, N, C, V);
  }

  void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) override {
    const char* op = "embedding_backward";
    on_device();
    const DType dt = check_floats(op, {{"dtable", &dtable}, {"dout", &dout}});
    check_ids(op, "ids", ids);
    const int64_t N = ids.numel(), V = dtable.rows(), C = dtable.cols();
    require(dout.rows() == N && dout.cols() == C, op,
            shapes({{"dtable", &dtable}, {"dout", &dout}, {"ids", &ids}}) +
                ": expected dout [N,C] for ids [N] and dtable [V,C]");
    cuda::embedding_backward(dt, dtable.data, dout.data, ids.as<int32_t>(), N, C, V);
  }

  // ---- loss ----
  void cross_entropy(Tensor losses, Tensor lse, Tensor logits, Tensor targets) override {
    const char* op = "cross_entropy";
    on_device();
    const DType dt = check_floats(op, {{"logits", &logits}});
    const DType st = check_stats(op, dt, {{"losses", &losses}, {"lse", &lse}});
    check_ids(op, "targets", targets);
    const int64_t N = logits.rows(), V = logits.cols();
    require(
        targets.numel() == N && losses.numel() == N && lse.numel() == N, op,
        shapes({{"losses", &losses}, {"lse", &lse}, {"logits", &logits}, {"targets", &targets}}) +
            ": expected losses/lse/targets [N] for logits [N,V]");
    cuda::cross_entropy_forward(dt, st, losses.data, lse.data, logits.data, targets.as<int32_t>(),
                                N, V);
  }

  void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                              float scale) override {
    const char* op = "cross_entropy_backward";
    on_device();
    const DType dt = check_floats(op, {{"dlogits", &dlogits}, {"logits", &logits}});
    const DType st = check_stats(op, dt, {{"lse", &lse}});
    check_ids(op, "targets", targets);
    const int64_t N = logits.rows(), V = logits.cols();
    require(
        dlogits.numel() == logits.numel() && targets.numel() == N && lse.numel() == N, op,
        shapes({{"dlogits", &dlogits}, {"logits", &logits}, {"lse", &lse}, {"targets", &targets}}) +
            ": expected dlogits like logits [N,V], lse/targets [N]");
    cuda::cross_entropy_backward(dt, st, dlogits.data, logits.data, lse.data, targets.as<int32_t>(),
                                 N, V, scale);
  }

  // ---- reductions ----
  double sum(Tensor x) override { return reduce(x, false); }
  double sum_squares(Tensor x) override { return reduce(x, true); }

  // ---- optimizer ----
  void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) override {
    const char* op = "adamw";
    on_device();
    const DType dt = check_floats(op, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}});
    require(dt == DType::f32, op,
            std::string("the CUDA AdamW keeps f32 state, got ") + dtype_name(dt));
    const int64_t n = param.numel();
    require(grad.numel() == n && m.numel() == n && v.numel() == n, op,
            shapes({{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}}) +
                ": expected equal element counts");
    require(hp.step >= 1, op, "step is 1-based (got " + std::to_string(hp.step) + ")");
    const double t = static_cast<double>(hp.step);
    const float inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(double(hp.beta1), t)));
    const float inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(double(hp.beta2), t)));
    cuda::adamw(param.as<float>(), grad.as<float>(), m.as<float>(), v.as<float>(), n, hp.lr,
                hp.beta1, hp.beta2, hp.eps, hp.weight_decay, inv_bc1, inv_bc2);
  }

 private:
  // The CUDA runtime's current device is per host thread; the trainer, the checkpoint writer and
  // the communicator may call from different threads.
  void on_device() const { cuda_check(cudaSetDevice(ordinal_), "cudaSetDevice"); }

  DType pointwise(const char* op, std::initializer_list<Named> ts) {
    on_device();
    const DType dt = check_floats(op, ts);
    const int64_t n = ts.begin()->second->numel();
    for (const auto& [name, t] : ts)
      require(t->numel() == n, op,
              std::string(name) + " " + t->shape_str() + " has " + std::to_string(t->numel()) +
                  " elements, expected " + std::to_string(n) + " (" + shapes(ts) + ")");
    return dt;
  }

  static void check_p(const char* op, float p) {
    require(p >= 0.0f && p < 1.0f, op, "p = " + std::to_string(p) + " is outside [0, 1)");
  }

  struct Dims3 {
    int64_t B, T, C;
  };
  static Dims3 attention_dims(const char* op, const Tensor& qkv, int n_head) {
    require(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, op,
            "qkv " + qkv.shape_str() + " must be [B,T,3C]");
    const int64_t C = qkv.dim(2) / 3;
    require(n_head > 0 && C % n_head == 0, op,
            "C = " + std::to_string(C) + " is not divisible by n_head = " + std::to_string(n_head));
    require(C / n_head <= kAttentionMaxHeadDim, op,
            "head_dim " + std::to_string(C / n_head) + " exceeds the CUDA kernel's " +
                std::to_string(kAttentionMaxHeadDim));
    return {qkv.dim(0), qkv.dim(1), C};
  }

  double reduce(const Tensor& x, bool squares) {
    const char* op = squares ? "sum_squares" : "sum";
    on_device();
    require(!x.empty() && x.device == Device::cuda, op, "x must be a device tensor");
    return cuda::sum(x.dtype, x.data, x.numel(), squares, scratch(reduce_scratch_bytes()));
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

  int ordinal_;
  std::string describe_;
  Gemm gemm_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
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

trainrun::Backend* trainrun_cuda_create_backend(int ordinal, char* err, size_t errlen) {
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
  if (ordinal < 0 || ordinal >= count) {
    set_err(err, errlen,
            "GPU " + std::to_string(ordinal) + " does not exist: " + std::to_string(count) +
                " CUDA device(s) are visible");
    return nullptr;
  }
  try {
    return new trainrun::cuda::CudaBackend(ordinal);
  } catch (const std::exception& ex) {
    set_err(err, errlen, ex.what());
    return nullptr;
  }
}

}  // extern "C"
