#include "trainrun/model/mlp.h"

namespace trainrun {

MLP::MLP(ParamStore& ps, const std::string& name, int d_model, float proj_std)
    : ps_(ps),
      d_model_(d_model),
      fc_(ps, name + ".fc", d_model, 4 * d_model, true, 0.02f),
      proj_(ps, name + ".proj", 4 * d_model, d_model, true, proj_std),
      act_(ps.backend(), Activation::gelu) {}

void MLP::bind(Arena& acts, Arena& scratch, int64_t rows) {
  DType dt = ps_.dtype();
  h_ = acts.take(dt, {rows, 4 * d_model_});
  a_ = acts.take(dt, {rows, 4 * d_model_});
  dh_ = scratch.take(dt, {rows, 4 * d_model_});
  da_ = scratch.take(dt, {rows, 4 * d_model_});
}

void MLP::forward(Tensor out, Tensor in) const {
  fc_.forward(h_, in);
  act_.forward(a_, h_);
  proj_.forward(out, a_);
}

// The hidden gradients are this module's own scratch: overwritten, so nothing zeroes them.
void MLP::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  proj_.backward(da_, dout, a_, GradWrite::overwrite);
  act_.backward(dh_, da_, h_, GradWrite::overwrite);
  fc_.backward(din, dh_, in, write);
}

}  // namespace trainrun
