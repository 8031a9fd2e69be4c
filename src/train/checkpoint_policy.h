// CheckpointPolicy: when the step loop saves a checkpoint. After every `every` steps (0: none on
// a schedule), after the last step, and at the step boundary where a stop was requested, so a
// preempted job resumes exactly there. Pure and cheap; every rank asks it with the same agreed
// values and so takes part in the same saves.
#pragma once

#include <cstdint>

namespace trainrun {

class CheckpointPolicy {
 public:
  CheckpointPolicy(int64_t every, int64_t last_step) : every_(every), last_step_(last_step) {}

  // `step` optimizer steps are done; `stop` is the stop request every rank agreed on.
  bool save_after(int64_t step, bool stop) const {
    return (every_ > 0 && step % every_ == 0) || step == last_step_ || stop;
  }

 private:
  int64_t every_, last_step_;
};

}  // namespace trainrun
