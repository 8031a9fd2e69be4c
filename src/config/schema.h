// The schema: one row per config key. The table in schema.cpp is the only list of keys; parsing,
// defaults, validation, --set, the resolved YAML and docs/config.md are all driven from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trainrun/core/experiment.h"

namespace trainrun::config {

// Where a key lives inside an Experiment: a function returning a reference to the member.
template <class T>
using Member = T& (*)(Experiment&);
// An enum member (DeviceChoice, ModelType, ...) is a key whose allowed values are its EnumNames.
using Ref = std::variant<Member<int>, Member<int64_t>, Member<uint64_t>, Member<double>,
                         Member<bool>, Member<std::string>, Member<std::vector<int>>,
                         Member<std::vector<double>>, Member<std::vector<std::string>>,
                         Member<std::vector<MixSource>>, Member<DeviceChoice>, Member<ModelType>,
                         Member<ActivationKind>, Member<Precision>, Member<ActivationCheckpointing>,
                         Member<LrSchedule>, Member<DataOrder>, Member<TpOverlap>>;

struct Field {
  std::string_view key;  // "model.n_layer"; top-level keys have no dot
  Ref ref;
  std::string_view description;
  bool resumable = false;  // may change when resuming from a checkpoint
  // Non-empty: an enum. Filled from EnumNames for an enum member; given only for a string key
  // with a fixed set of values (data.synthetic).
  std::vector<std::string_view> allowed{};
  std::optional<double> min{};  // numbers, and each element of a list
  std::optional<double> max{};
  bool min_open = false;  // min itself is not allowed
  bool max_open = false;
  int list_len = -1;                   // lists: required length, -1 = any
  bool file_name = false;              // strings: must be a safe file name
  std::string_view default_note = {};  // shown instead of the default when it is derived

  std::string_view section() const;  // "" for top-level keys
  std::string_view leaf() const;
  std::string type_name() const;     // int, uint, double, bool, string, enum, list<int>, ...
  std::string allowed_text() const;  // ">= 1", "[0, 1)", "gpt, mlp", "" when anything goes
  bool is_enum() const { return !allowed.empty(); }
};

const std::vector<Field>& schema();
const Field* find_field(std::string_view key);
// Section names ("model", "data", ...) in schema order.
const std::vector<std::string_view>& sections();
bool is_section(std::string_view name);

}  // namespace trainrun::config
