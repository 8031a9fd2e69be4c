#include "trainrun/obs/tb_hparams.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "trainrun/core/durable_file.h"
#include "trainrun/obs/tb_events.h"

namespace trainrun::tb {

namespace {

constexpr const char* kPluginName = "hparams";
namespace data {  // HParamsPluginData
constexpr int kVersion = 1, kExperiment = 2, kSessionStart = 3, kSessionEnd = 4;
}
namespace experiment {
constexpr int kDescription = 1, kTimeCreated = 3, kHParamInfos = 4, kMetricInfos = 5;
}
namespace hparam_info {
constexpr int kName = 1, kType = 4, kDomainDiscrete = 5;
}
namespace metric_info {
constexpr int kName = 1, kDatasetType = 5;
}
constexpr int kMetricGroup = 1, kMetricTag = 2;
namespace start {
constexpr int kHParams = 1, kGroupName = 4, kStartTime = 5;
}
namespace end {
constexpr int kStatus = 1, kEndTime = 2;
}
namespace value {  // google.protobuf.Value
constexpr int kNumber = 2, kString = 3, kBool = 4;
}
constexpr int kListValues = 1, kMapKey = 1, kMapValue = 2;
enum DataType : uint64_t { kString = 1, kBool = 2, kFloat64 = 3 };
enum DatasetType : uint64_t { kTraining = 1, kValidation = 2 };

bool is_number(const std::string& s, double& v) {
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && std::isfinite(v);
}

DataType type_of(const std::string& s) {
  double v;
  if (is_number(s, v)) return kFloat64;
  if (s == "true" || s == "false") return kBool;
  return kString;
}

ProtoWriter value_of(const std::string& s, DataType type) {
  ProtoWriter v;
  double x;
  if (type == kFloat64 && is_number(s, x))
    v.float64(value::kNumber, x);
  else if (type == kBool && (s == "true" || s == "false"))
    v.varint(value::kBool, s == "true");
  else
    v.bytes(value::kString, s);
  return v;
}

std::string plugin_data(int field, const ProtoWriter& message) {
  ProtoWriter d;
  d.varint(data::kVersion, 0);  // proto3 drops a 0; TensorBoard reads 0 either way
  d.message(field, message);
  return d.str();
}

}  // namespace

std::string hparams_experiment_event(double wall_time, const std::vector<std::string>& names,
                                     const std::vector<std::vector<std::string>>& domains,
                                     const std::vector<HParamsMetric>& metrics,
                                     const std::string& description) {
  ProtoWriter e;
  e.bytes(experiment::kDescription, description);
  e.float64(experiment::kTimeCreated, wall_time);
  for (size_t i = 0; i < names.size(); ++i) {
    // One type per hyperparameter: a number or a bool when every value is one, else a string.
    const DataType first = domains[i].empty() ? kString : type_of(domains[i].front());
    const bool same = std::all_of(domains[i].begin(), domains[i].end(),
                                  [&](const std::string& v) { return type_of(v) == first; });
    const DataType type = same ? first : kString;
    ProtoWriter info, list;
    info.bytes(hparam_info::kName, names[i]);
    info.varint(hparam_info::kType, type);
    for (const std::string& v : domains[i]) list.message(kListValues, value_of(v, type));
    info.message(hparam_info::kDomainDiscrete, list);
    e.message(experiment::kHParamInfos, info);
  }
  for (const HParamsMetric& m : metrics) {
    ProtoWriter name, info;
    name.bytes(kMetricGroup, "tb");
    name.bytes(kMetricTag, m.tag);
    info.message(metric_info::kName, name);
    info.varint(metric_info::kDatasetType, m.training ? kTraining : kValidation);
    e.message(experiment::kMetricInfos, info);
  }
  return plugin_event(wall_time, 0, "_hparams_/experiment", kPluginName,
                      plugin_data(data::kExperiment, e));
}

std::string hparams_session_start_event(double wall_time, const HParams& hparams,
                                        const std::string& group, double start_time) {
  ProtoWriter s;
  for (const auto& [name, v] : hparams) {
    ProtoWriter entry;
    entry.bytes(kMapKey, name);
    entry.message(kMapValue, value_of(v, type_of(v)));
    s.message(start::kHParams, entry);
  }
  s.bytes(start::kGroupName, group);
  s.float64(start::kStartTime, start_time);
  return plugin_event(wall_time, 0, "_hparams_/session_start_info", kPluginName,
                      plugin_data(data::kSessionStart, s));
}

std::string hparams_session_end_event(double wall_time, SessionStatus status, double end_time) {
  ProtoWriter s;
  s.varint(end::kStatus, static_cast<uint64_t>(status));
  s.float64(end::kEndTime, end_time);
  return plugin_event(wall_time, 0, "_hparams_/session_end_info", kPluginName,
                      plugin_data(data::kSessionEnd, s));
}

void write_hparams_file(const std::string& dir, const std::vector<std::string>& events,
                        double wall_time) {
  std::string bytes = tfrecord(file_version_event(wall_time));
  for (const std::string& e : events) bytes += tfrecord(e);
  write_file_durably((std::filesystem::path(dir) / kHParamsEventsFile).string(), bytes);
}

}  // namespace trainrun::tb
