// ModelState: the model's parameters as checkpointed state (state_dict.h): model/NAME for every
// parameter, with its global shape. The weights are the same on every data-parallel rank; each
// writes the flat range it is given (its shard_of share), so the world writes them once, in
// parallel, and nothing is gathered. A restore reads every tensor whole, from whichever files and
// layout hold it.
//
// Thread safety: the step loop's thread. Borrows the parameter store and backend.
#pragma once

#include "trainrun/backend/backend.h"
#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/model/params.h"

namespace trainrun {

class ModelState final : public Stateful {
 public:
  ModelState(ParamStore& ps, Backend& be, Shard write) : ps_(ps), be_(be), write_(write) {}
  void state_dict(StateDict& out) override;
  // Also refreshes the compute copy of the weights (a bf16 run's).
  void load_state_dict(StateSource& in) override;

 private:
  ParamStore& ps_;
  Backend& be_;
  Shard write_;
};

}  // namespace trainrun
