// TrainState, the summary of a checkpoint's named values (checkpoint.h).
#include <fmt/format.h>

#include <limits>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

std::vector<NamedValue> values_of(const TrainState& s) {
  return {{state_name::step, s.step},
          {state_name::tokens_seen, s.tokens_seen},
          {state_name::restarts, s.restarts},
          {state_name::world_size, int64_t{s.world_size}},
          {state_name::samples_seen, s.samples_seen},
          {state_name::seed, s.seed},
          {state_name::bad_steps_total, s.bad_steps_total},
          {state_name::lr_scale, s.lr_scale}};
}

TrainState train_state_of(const std::vector<NamedValue>& values, const std::string& where) {
  TrainState s;
  s.step = read_int(values, state_name::step, where);
  s.tokens_seen = read_int(values, state_name::tokens_seen, where);
  s.restarts = read_int(values, state_name::restarts, where);
  const int64_t world = read_int(values, state_name::world_size, where);
  if (world < 0 || world > std::numeric_limits<int>::max())
    throw CheckpointError(
        fmt::format("{}: {} is {}, not a number of ranks", where, state_name::world_size, world));
  s.world_size = static_cast<int>(world);
  s.samples_seen = read_int(values, state_name::samples_seen, where);
  s.seed = read_uint(values, state_name::seed, where);
  s.bad_steps_total = read_int(values, state_name::bad_steps_total, where);
  s.lr_scale = read_double(values, state_name::lr_scale, where);
  return s;
}

TrainState RankSnapshot::summary() const {
  TrainState s = train_state_of(values, fmt::format("rank {}'s snapshot", rank));
  s.config_yaml = config_yaml;
  return s;
}

}  // namespace trainrun
