#include "trainrun/model/swiglu_mlp.h"

namespace trainrun {

SwiGluMLP::SwiGluMLP(ParamStore& ps, const std::string& name, int d_model, int hidden,
                     float proj_std)
    : ps_(ps),
      hidden_(hidden),
      gate_up_(ps, name + ".gate_up", d_model, 2 * hidden, false, 0.02f, true,
               {TpMode::column, {hidden, hidden}}),
      down_(ps, name + ".down", hidden, d_model, false, proj_std, true, {TpMode::row}) {
  hidden_ = down_.in_features();  // this rank's share of gate and of up: hidden / tp
}

void SwiGluMLP::bind(ActivationArenas acts, Arena& scratch, int64_t rows) {
  const DType dt = ps_.dtype();
  const int64_t h = hidden_;
  g_ = acts.kept.take(dt, {rows, 2 * h});
  s_ = acts.pointwise.take(dt, {rows, h});
  dg_ = scratch.take(dt, {rows, 2 * h});
  ds_ = scratch.take(dt, {rows, h});
}

void SwiGluMLP::forward(Tensor out, Tensor in) const {
  gate_up_.forward(g_, in);
  recompute_pointwise();
  down_.forward(out, s_);
}

void SwiGluMLP::recompute_pointwise() const {
  ps_.backend().swiglu(s_, g_);
}

// The hidden gradients are this module's own scratch: overwritten, so nothing zeroes them.
void SwiGluMLP::backward(Tensor din, Tensor dout, Tensor in, GradWrite write) const {
  down_.backward(ds_, dout, s_, GradWrite::overwrite);
  ps_.backend().swiglu_backward(dg_, ds_, g_, GradWrite::overwrite);
  gate_up_.backward(din, dg_, in, write);
}

}  // namespace trainrun
