// What a Stateful component saves, for tests that check it without writing a checkpoint.
#pragma once

#include <string>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"
#include "trainrun/core/errors.h"

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

// The named values `component` saves.
inline std::vector<NamedValue> saved_values(Stateful& component) {
  StateDict sd;
  component.state_dict(sd);
  return sd.values();
}

// A checkpoint holding only named values, to restore a component's values from without writing
// one.
class ValueSource final : public StateSource {
 public:
  explicit ValueSource(std::vector<NamedValue> values) : values_(std::move(values)) {}
  bool shape_of(const std::string&, std::vector<int64_t>*) const override { return false; }
  std::vector<std::string> tensor_names() const override { return {}; }
  void read(const std::vector<SliceRequest>& requests) override {
    if (!requests.empty()) throw CheckpointError("ValueSource holds no tensor");
  }
  const std::vector<NamedValue>& values() const override { return values_; }
  const std::string& path() const override { return path_; }

 private:
  std::vector<NamedValue> values_;
  std::string path_ = "(values)";
};

}  // namespace trainrun::testing
