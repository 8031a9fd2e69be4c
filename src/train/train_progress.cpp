#include "train_progress.h"

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

void TrainProgress::state_dict(StateDict& out) {
  out.put(state_name::step, step);
  out.put(state_name::tokens_seen, tokens_seen);
  out.put(state_name::restarts, restarts);
}

void TrainProgress::load_state_dict(StateSource& in) {
  step = read_int(in, state_name::step);
  tokens_seen = read_int(in, state_name::tokens_seen);
  restarts = read_int(in, state_name::restarts);
}

}  // namespace trainrun
