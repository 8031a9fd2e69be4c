// The phases of a rank's step, as the watchdog, heartbeat files, failure records and traces name
// them. The words are fixed: heartbeat files of other ranks and the failure records are read by
// name.
#pragma once

#include <cstdint>
#include <iterator>

#include "trainrun/core/enum_names.h"

namespace trainrun {

enum class Phase : uint8_t {
  startup,  // before the first step (setup, restore)
  data,     // waiting for a batch
  forward,
  backward,
  comm,  // blocked in a collective of the step
  optimizer,
  checkpoint,  // snapshot and write
  eval,
  sync,  // the final barrier
};

template <>
struct EnumNames<Phase> {
  static constexpr std::string_view names[] = {
      "startup", "data", "forward", "backward", "comm", "optimizer", "checkpoint", "eval", "sync"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(Phase::sync));
};

// The name as a C string of static storage (the table's literals), for note_phase and traces.
constexpr const char* phase_name(Phase p) {
  return enum_name(p).data();
}

// Every rank meets the others here: a rank waiting in one has arrived.
constexpr bool collective(Phase p) {
  return p == Phase::comm || p == Phase::sync;
}

// Phases that may legitimately take long (starting up, writing a big checkpoint, evaluating).
constexpr bool may_take_long(Phase p) {
  return p == Phase::startup || p == Phase::checkpoint || p == Phase::eval;
}

}  // namespace trainrun
