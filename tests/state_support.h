// What a Stateful component saves, for tests that check it without writing a checkpoint.
#pragma once

#include <string>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun::testing {

// The elements `component` writes of the tensors under `prefix` ("optimizer/m"), in the order it
// declares its slices: for a flat-buffer component, its write range of that buffer.
inline std::vector<float> saved_flat(Stateful& component, const std::string& prefix) {
  StateDict sd;
  component.state_dict(sd);
  RankSnapshot snap;
  take_snapshot(sd, &snap);
  std::vector<float> out;
  for (const RankSnapshot::Slice& s : snap.slices)
    if (snap.tensors[s.tensor].name.starts_with(prefix + "/"))
      out.insert(out.end(), snap.data.begin() + s.begin,
                 snap.data.begin() + s.begin + box_numel(s.box));
  return out;
}

}  // namespace trainrun::testing
