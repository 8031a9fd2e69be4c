// Linear: out = in . W^T + b, W stored [out, in] (GPT-2's layout, so a tied head reuses wte).
#pragma once

#include <string>
#include <vector>

#include "trainrun/model/params.h"

namespace trainrun {

// How a Linear splits over the tensor-parallel ranks (ParamStore::tp(); Megatron-LM's
// ColumnParallelLinear and RowParallelLinear, docs/parallelism.md):
//   column: each rank computes its share of the outputs (the weight's rows and the bias split,
//     block by block when the output is fused: q|k|v, gate|up). Its input is whole on every
//     rank, so the input's gradient is each rank's partial sum: backward all-reduces it, while
//     it computes the weight gradient (TensorParallel::overlap).
//   row: each rank takes its share of the inputs (the weight's columns) and computes a partial
//     output, which forward all-reduces; the bias is whole and added once (by tp rank 0). The
//     output and its gradient are whole on every rank, so the bias gradient is too.
// A column-parallel layer followed by a row-parallel one (attention, the MLP) is one all-reduce
// each way, and what lies between (the heads, the activation) stays local.
enum class TpMode { none, column, row };
struct LinearTp {
  TpMode mode = TpMode::none;
  std::vector<int64_t> blocks = {};  // column: the fused outputs' block sizes (global)
};

class Linear {
 public:
  // `in` and `out` are the global feature counts; in_features() and out_features() this rank's.
  Linear(ParamStore& ps, const std::string& name, int in, int out, bool bias, float init_std,
         bool decay = true, LinearTp tp = {});
  void forward(Tensor out, Tensor in) const;
  // din += (or =, with GradWrite::overwrite) d(loss)/d(in); the weight gradients accumulate.
  // din may be empty (first layer of a model fed by an embedding that is handled elsewhere).
  // Column-parallel over more than one rank: overwrite only (the sum over ranks is of this
  // layer's contributions alone).
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;
  // This Linear with a GELU after it: pre = forward(in), out = gelu(pre) (Backend::matmul_gelu).
  void forward_gelu(Tensor out, Tensor pre, Tensor in) const;
  // The backward of a Linear whose input is gelu(pre): dpre = d(loss)/d(pre), overwritten
  // (Backend::matmul_backward_gelu); the weight gradients as backward().
  void backward_gelu(Tensor dpre, Tensor dout, Tensor in, Tensor pre) const;
  int in_features() const { return in_; }
  int out_features() const { return out_; }

 private:
  GradWrite param_write() const;  // how this step writes the weight (and bias) gradients
  Tensor bias_here() const;       // the bias this rank adds in forward (empty: none)

  ParamStore& ps_;
  int in_, out_;
  TpMode mode_;
  int w_ = -1, b_ = -1;
};

// The backward of a layer whose input gradient is each tp rank's partial sum (a column-parallel
// Linear, the tied vocabulary-parallel head): Backend::matmul_backward, then din all-reduced
// over tp, during the weight-gradient GEMM when tp.overlap is set (the same bits either way).
void matmul_backward_tp_sum(const TensorParallel& tp, Backend& be, Tensor din, Tensor dw,
                            Tensor dbias, Tensor dout, Tensor in, Tensor w, GradWrite write,
                            GradWrite param_write);

}  // namespace trainrun
