// ModelState: the model's parameters as checkpointed state (state_dict.h): model/NAME for every
// parameter, with its global shape. The master weights live where the data-parallel strategy
// keeps them (all on every rank, or sharded by ZeRO-2/3): each rank writes its share of what it
// holds (HeldPieces::written), so the world writes every weight once, in parallel, and nothing is
// gathered. A restore reads what this rank holds, from whichever files and layout hold it.
//
// Thread safety: the step loop's thread. Borrows the parameter store and the strategy.
#pragma once

#include "data_parallel.h"
#include "trainrun/checkpoint/state_dict.h"
#include "trainrun/model/params.h"

namespace trainrun {

class ModelState final : public Stateful {
 public:
  ModelState(ParamStore& ps, DataParallel& dp) : ps_(ps), dp_(dp) {}
  void state_dict(StateDict& out) override;
  // Collective (DataParallel::weights_changed): the compute copies follow the restored masters.
  void load_state_dict(StateSource& in) override;

 private:
  ParamStore& ps_;
  DataParallel& dp_;
};

}  // namespace trainrun
