#include "model_state.h"

#include "trainrun/core/state_buffer.h"

namespace trainrun {

void ModelState::state_dict(StateDict& out) {
  const Tensor params = ps_.params();
  add_flat_state(out, "model", ps_.entries(), write_,
                 [this, params](int64_t at, int64_t n, float* o) {
                   be_.copy(Tensor(o, DType::f32, Device::cpu, {n}), params.slice(at, {n}));
                 });
}

void ModelState::load_state_dict(StateSource& in) {
  const int64_t n = ps_.numel();
  StateBuffer host(static_cast<size_t>(n));  // every element is read below
  read_flat_state(in, "model", ps_.entries(), Shard{0, n}, host.data());
  be_.copy(ps_.params(), Tensor(host.data(), DType::f32, Device::cpu, {n}));
  ps_.refresh_compute();
}

}  // namespace trainrun
