// TrainProgress: how far the run has come, as checkpointed state (state_dict.h): the optimizer
// steps done, the tokens trained on, and the relaunches counted so far. The trainer advances it
// after every step; a restore puts it back where the checkpoint was.
//
// Thread safety: the step loop's thread.
#pragma once

#include <cstdint>

#include "trainrun/checkpoint/state_dict.h"

namespace trainrun {

class TrainProgress final : public Stateful {
 public:
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int64_t restarts = 0;

  void state_dict(StateDict& out) override;
  void load_state_dict(StateSource& in) override;
};

}  // namespace trainrun
