#include "trainrun/model/mlp.h"

namespace trainrun {

MLP::MLP(ParamStore& ps, const std::string& name, int d_model, float proj_std)
    : ps_(ps),
      d_model_(d_model),
      fc_(ps, name + ".fc", d_model, 4 * d_model, true, 0.02f),
      proj_(ps, name + ".proj", 4 * d_model, d_model, true, proj_std) {}

void MLP::bind(Arena& acts, Arena& scratch, int64_t rows) {
  DType dt = ps_.dtype();
  h_ = acts.take(dt, {rows, 4 * d_model_});
  a_ = acts.take(dt, {rows, 4 * d_model_});
  dh_ = scratch.take(dt, {rows, 4 * d_model_});
}

// fc and the GELU in one op, and proj's input gradient through the GELU in one op: a GPU runs
// each as one GEMM with a cuBLASLt epilogue (Backend::matmul_gelu, matmul_backward_gelu).
void MLP::forward(Tensor out, Tensor in) const {
  fc_.forward_gelu(a_, h_, in);
  proj_.forward(out, a_);
}

// The hidden gradient is this module's own scratch: overwritten, so nothing zeroes it.
void MLP::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  proj_.backward_gelu(dh_, dout, a_, h_);
  fc_.backward(din, dh_, in, write);
}

}  // namespace trainrun
