// A rank's snapshot (checkpoint.h): packing the components' slices, and the finiteness check a
// snapshot must pass before it may become part of a checkpoint.
#include <fmt/format.h>

#include "non_finite.h"
#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

void take_snapshot(const StateDict& state, RankSnapshot* snap) {
  snap->values = state.values();
  snap->tensors = state.tensors();
  snap->slices.clear();
  int64_t at = 0;
  for (const StateDict::Slice& s : state.slices()) {
    snap->slices.push_back({s.tensor, s.box, at});
    at += box_numel(s.box);
  }
  snap->data.resize(static_cast<size_t>(at));  // every element is filled below
  for (size_t i = 0; i < state.slices().size(); ++i)
    state.slices()[i].fill(snap->data.data() + snap->slices[i].begin);
}

std::string non_finite_reason(const RankSnapshot& snap) {
  std::optional<NonFinite> nf = find_non_finite(snap.data.data(), snap.data.size());
  if (!nf) return "";
  for (const RankSnapshot::Slice& s : snap.slices) {
    const size_t n = static_cast<size_t>(box_numel(s.box));
    if (nf->first < static_cast<size_t>(s.begin) || nf->first >= static_cast<size_t>(s.begin) + n)
      continue;
    NonFinite in_slice = *find_non_finite(snap.data.data() + s.begin, n);
    return fmt::format(
        "rank {}'s state: {}{}", snap.rank,
        non_finite_message(fmt::format("{} {}", snap.tensors[s.tensor].name, box_str(s.box)),
                           in_slice, n),
        in_slice.count < nf->count ? fmt::format(", {} in all", nf->count) : std::string());
  }
  return fmt::format("rank {}'s state holds {} non-finite values", snap.rank, nf->count);
}

}  // namespace trainrun
