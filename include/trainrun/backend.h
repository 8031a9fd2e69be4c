// Backend: the op set, and the only code that knows which device the memory lives on.
// The CPU backend (src/backend/cpu/) is the reference; the CUDA backend (kernels/, loaded as a
// plugin) must match it within stated tolerances. Modules are written once, over these ops.
//
// Conventions every implementation follows:
//  - Shapes are read from the tensors; rows x cols means [..., cols] flattened.
//  - Forward ops overwrite their output.
//  - Backward ops ACCUMULATE (+=) into every gradient they produce, input and parameter
//    gradients alike. The trainer zeroes activation gradients once per micro-batch and parameter
//    gradients once per step, so gradient accumulation over micro-batches is free.
//  - All float tensors of one call share a dtype (f32 everywhere; f64 on CPU for gradient checks;
//    bf16 activations on CUDA). Index tensors are i32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainrun/tensor.h"

namespace trainrun {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (oneDNN sgemm, 2 OpenMP threads)"

  // ---- memory ----
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Copies between any two tensors of equal bytes; either may live on the host or this device.
  virtual void copy(Tensor dst, Tensor src) = 0;
  virtual void fill(Tensor x, double value) = 0;
  virtual void synchronize() {}

  // ---- dense ----
  // out[N,OC] = in[N,C] . w[OC,C]^T + bias[OC] (bias may be empty)
  virtual void matmul(Tensor out, Tensor in, Tensor w, Tensor bias) = 0;
  // din[N,C] += dout . w ; dw[OC,C] += dout^T . in ; dbias[OC] += colsum(dout).
  // din and dbias may be empty (skipped).
  virtual void matmul_backward(Tensor din, Tensor dw, Tensor dbias, Tensor dout, Tensor in,
                               Tensor w) = 0;

  // ---- normalisation and activations ----
  // out = (in - mean) * rstd * w + b over the last dim; mean, rstd: [rows] (saved for backward)
  virtual void layernorm(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor w, Tensor b) = 0;
  virtual void layernorm_backward(Tensor din, Tensor dw, Tensor db, Tensor dout, Tensor in,
                                  Tensor w, Tensor mean, Tensor rstd) = 0;
  // GELU, tanh approximation (GPT-2's)
  virtual void gelu(Tensor out, Tensor in) = 0;
  virtual void gelu_backward(Tensor din, Tensor dout, Tensor in) = 0;
  virtual void relu(Tensor out, Tensor in) = 0;
  virtual void relu_backward(Tensor din, Tensor dout, Tensor in) = 0;
  // Inverted dropout with probability p; the mask is a pure function of (seed, element index),
  // so backward recomputes it and a resumed run draws the same masks.
  virtual void dropout(Tensor out, Tensor in, float p, uint64_t seed) = 0;
  virtual void dropout_backward(Tensor din, Tensor dout, float p, uint64_t seed) = 0;

  // ---- elementwise ----
  virtual void add(Tensor out, Tensor a, Tensor b) = 0;  // out = a + b (out may alias a or b)
  virtual void accumulate(Tensor dst, Tensor src) = 0;   // dst += src
  virtual void scale(Tensor x, double s) = 0;            // x *= s

  // ---- attention ----
  // Causal multi-head self-attention. qkv: [B,T,3C] laid out as (q | k | v), each [B,T,NH,hd].
  // out: [B,T,C]; lse: [B,NH,T] row log-sum-exp of the scaled scores, saved so backward can
  // recompute probabilities without storing a T x T matrix.
  virtual void attention(Tensor out, Tensor lse, Tensor qkv, int n_head) = 0;
  virtual void attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                  int n_head) = 0;

  // ---- embedding ----
  // out[N,C] = table[ids[n], :] ; dtable[ids[n], :] += dout[n, :]
  virtual void embedding(Tensor out, Tensor ids, Tensor table) = 0;
  virtual void embedding_backward(Tensor dtable, Tensor dout, Tensor ids) = 0;

  // ---- loss ----
  // losses[N] = logsumexp(logits[n]) - logits[n, targets[n]]; lse[N] saved.
  virtual void cross_entropy(Tensor losses, Tensor lse, Tensor logits, Tensor targets) = 0;
  // dlogits[N,V] = (softmax(logits) - onehot(targets)) * scale. Overwrites (not +=) and may
  // alias logits: the fused form never holds a second [N,V] tensor.
  virtual void cross_entropy_backward(Tensor dlogits, Tensor logits, Tensor lse, Tensor targets,
                                      float scale) = 0;

  // ---- reductions (results come back to the host) ----
  virtual double sum(Tensor x) = 0;
  virtual double sum_squares(Tensor x) = 0;  // NaN/Inf propagate, so callers detect bad steps

  // ---- optimizer ----
  // Fused AdamW with decoupled weight decay over a contiguous range of the flat buffers.
  virtual void adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWParams& hp) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

// Loads libtrainrun_cuda.so from beside the executable (dlopen) and creates its backend on GPU
// `ordinal`. Returns null and says why in `why_not` when the plugin, the CUDA libraries, a
// driver or a GPU is missing; never fails to start the CPU-only binary.
std::unique_ptr<Backend> make_cuda_backend(int ordinal, std::string* why_not);

// Peak fp32 GEMM rate of this backend in GFLOP/s, measured now on square-ish GEMMs of the given
// size (CPU: oneDNN sgemm on the current OpenMP threads). Used for MFU and `trainrun plan`.
double measure_gemm_peak_gflops(Backend& be, int size);

}  // namespace trainrun
