// The Llama feed-forward block, bias-free: g = in . Wgu^T ([rows, 2H] = gate | up),
// s = silu(gate) * up, out = s . Wdown^T. Parameters "<name>.gate_up.weight" [2H, C] (rows
// 0..H-1 the gate, H..2H-1 the up projection) and "<name>.down.weight" [C, H]: one fused matmul
// for gate and up instead of two.
#pragma once

#include <string>

#include "trainrun/model/linear.h"

namespace trainrun {

class SwiGluMLP {
 public:
  SwiGluMLP(ParamStore& ps, const std::string& name, int d_model, int hidden, float proj_std);
  // gate|up's output is kept, silu(gate) * up is pointwise (ActivationArenas).
  void bind(ActivationArenas acts, Arena& scratch, int64_t rows);
  void bind(Arena& acts, Arena& scratch, int64_t rows) { bind({acts, acts}, scratch, rows); }
  void forward(Tensor out, Tensor in) const;
  // silu(gate) * up again from gate|up's output (selective checkpointing).
  void recompute_pointwise() const;
  // din += d(loss)/d(in). Uses the bound gradient scratch, which the caller zeroes.
  // din += (or =) d(loss)/d(in), as Linear::backward.
  void backward(Tensor din, Tensor dout, Tensor in, GradWrite write = GradWrite::accumulate) const;

 private:
  ParamStore& ps_;
  int hidden_;
  Linear gate_up_, down_;
  Tensor g_, s_;    // activations
  Tensor dg_, ds_;  // gradient scratch
};

}  // namespace trainrun
