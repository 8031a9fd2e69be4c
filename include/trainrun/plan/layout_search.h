// The layout search (`trainrun plan --search`): for the config's model, batch, device and rank
// count, every layout trainrun can run (distributed.tp, distributed.zero, distributed.dp_replicate,
// train.activation_checkpointing, train.micro_batch_size) planned by make_plan, those that fit
// ranked by predicted step time. Each layout is checked by the config rules first, so every one
// listed is one `trainrun CONFIG --set ...` accepts.
#pragma once

#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/plan/plan.h"

namespace trainrun {

struct Layout {
  int tp = 1, zero = 0, dp_replicate = 1, micro_batch = 1;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::none;
  double step_seconds = 0, tokens_per_second_per_rank = 0, mfu = 0, bytes_per_rank = 0;
  std::vector<std::string> sets;  // the --set values that select it
};

struct LayoutSearch {
  int world = 1;
  std::string device;
  int tried = 0;                // layouts the config rules accept
  std::vector<Layout> fitting;  // those that fit the device, fastest first
};

LayoutSearch search_layouts(const Experiment& exp, const DevicePeak& peak);
// The `top` fastest (all when top <= 0).
std::string layouts_text(const LayoutSearch& s, int top);
std::string layouts_json(const LayoutSearch& s, int top);

}  // namespace trainrun
