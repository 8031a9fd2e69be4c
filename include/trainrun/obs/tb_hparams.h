// TensorBoard's HParams plugin, written by hand as tb_events.h writes scalars: an experiment
// summary (which hyperparameters and metrics a sweep has) at the sweep directory, and a
// session (one point's values, its start and its end) at each point's run directory, so that
// `tensorboard --logdir SWEEP_DIR` shows every point in its HPARAMS tab with the last value of
// each metric from the point's own event files (RUN_DIR/tb, the metric group "tb"). Fields
// (tensorboard/plugins/hparams/{api,plugin_data}.proto, google/protobuf/struct.proto):
//   HParamsPluginData { int32 version = 1; Experiment experiment = 2;
//                       SessionStartInfo session_start_info = 3; SessionEndInfo session_end_info =
//                       4; }
//   Experiment { string description = 1; double time_created_secs = 3;
//                repeated HParamInfo hparam_infos = 4; repeated MetricInfo metric_infos = 5; }
//   HParamInfo { string name = 1; DataType type = 4; ListValue domain_discrete = 5; }
//   MetricInfo { MetricName name = 1; DatasetType dataset_type = 5; }
//   MetricName { string group = 1; string tag = 2; }
//   SessionStartInfo { map<string, Value> hparams = 1; string group_name = 4;
//                      double start_time_secs = 5; }
//   SessionEndInfo { Status status = 1; double end_time_secs = 2; }
//   Value { double number_value = 2; string string_value = 3; bool bool_value = 4; }
//   ListValue { repeated Value values = 1; }
// Pure functions but the writers: thread safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace trainrun::tb {

// The file a session or an experiment summary lives in: one per directory, replaced whole.
inline constexpr const char* kHParamsEventsFile = "events.out.tfevents.hparams";

// A hyperparameter's value as written on the command line: a number when it reads as one,
// true/false as a bool, else a string.
using HParams = std::vector<std::pair<std::string, std::string>>;

struct HParamsMetric {
  std::string tag;       // "train/loss"
  bool training = true;  // dataset type: training, else validation
};

// The experiment: each hyperparameter with the values the sweep gives it (its domain), and the
// metrics to show, read from each session's "tb" subdirectory.
std::string hparams_experiment_event(double wall_time, const std::vector<std::string>& names,
                                     const std::vector<std::vector<std::string>>& domains,
                                     const std::vector<HParamsMetric>& metrics,
                                     const std::string& description);
// One session's start; with `ended`, also its end: status success (done), failure, or unknown
// (preempted: it will go on).
enum class SessionStatus { unknown = 0, success = 1, failure = 2, running = 3 };
std::string hparams_session_start_event(double wall_time, const HParams& hparams,
                                        const std::string& group, double start_time);
std::string hparams_session_end_event(double wall_time, SessionStatus status, double end_time);

// `events` (encoded Events) as DIR/kHParamsEventsFile, after the file_version record, written
// durably (a reader sees the old file or the new one whole). Throws Error(kExitWrite).
void write_hparams_file(const std::string& dir, const std::vector<std::string>& events,
                        double wall_time);

}  // namespace trainrun::tb
