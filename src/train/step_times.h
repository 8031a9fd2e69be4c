// StepTimes: where one training step's wall time went, in seconds. Filled by the step loop and
// the data-parallel strategy, read by the step reporter (metrics, stragglers).
#pragma once

namespace trainrun {

struct StepTimes {
  double data = 0, forward = 0, backward = 0, optimizer = 0, checkpoint = 0;
  double comm_wait = 0;   // blocked in collectives: the part communication did not hide
  double comm_total = 0;  // in collectives, hidden behind compute or not
  double total = 0;       // the whole step, from its first micro-batch to its update
};

}  // namespace trainrun
