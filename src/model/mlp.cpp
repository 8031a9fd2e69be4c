#include "trainrun/model/mlp.h"

namespace trainrun {

MLP::MLP(ParamStore& ps, const std::string& name, int d_model, float proj_std)
    : ps_(ps),
      fc_(ps, name + ".fc", d_model, 4 * d_model, true, 0.02f, true, {TpMode::column}),
      proj_(ps, name + ".proj", 4 * d_model, d_model, true, proj_std, true, {TpMode::row}),
      hidden_(fc_.out_features()) {}

void MLP::bind(ActivationArenas acts, Arena& scratch, int64_t rows) {
  DType dt = ps_.dtype();
  h_ = acts.kept.take(dt, {rows, hidden_});
  a_ = acts.pointwise.take(dt, {rows, hidden_});
  dh_ = scratch.take(dt, {rows, hidden_});
  fused_ = !acts.recomputed;
}

// fc and the GELU in one op, and proj's input gradient through the GELU in one op: a GPU runs
// each as one GEMM with a cuBLASLt epilogue (Backend::matmul_gelu, matmul_backward_gelu). The
// epilogue computes the GELU from the GEMM's f32 accumulator, and a recomputation has only the
// stored (under bf16 rounded) fc output: when the GELU is recomputed, the forward runs it
// unfused too, from the stored output, so both give the same bits.
void MLP::forward(Tensor out, Tensor in) const {
  if (fused_) {
    fc_.forward_gelu(a_, h_, in);
  } else {
    fc_.forward(h_, in);
    recompute_pointwise();
  }
  proj_.forward(out, a_);
}

void MLP::recompute_pointwise() const {
  ps_.backend().gelu(a_, h_);
}

// The hidden gradient is this module's own scratch: overwritten, so nothing zeroes it.
void MLP::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  proj_.backward_gelu(dh_, dout, a_, h_);
  fc_.backward(din, dh_, in, write);
}

}  // namespace trainrun
