#include "model_state.h"

#include "trainrun/core/state_buffer.h"

namespace trainrun {

void ModelState::state_dict(StateDict& out) {
  const HeldPieces w = dp_.weights();
  add_flat_state(out, "model", ps_.entries(), w.written(),
                 [this, w](int64_t at, int64_t n, float* o) {
                   ps_.backend().copy(Tensor(o, DType::f32, Device::cpu, {n}),
                                      w.local.slice(w.packed(at), {n}));
                 });
}

void ModelState::load_state_dict(StateSource& in) {
  const HeldPieces w = dp_.weights();
  const int64_t n = w.local.numel();
  StateBuffer host(static_cast<size_t>(n));  // every element is read below
  read_flat_state(in, "model", ps_.entries(), w.pieces, host.data());
  if (n > 0) ps_.backend().copy(w.local, Tensor(host.data(), DType::f32, Device::cpu, {n}));
  dp_.weights_changed();
}

}  // namespace trainrun
