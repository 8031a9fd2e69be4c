// TensorBoardLog: a run's metrics rows as TensorBoard event files in RUN_DIR/tb, one file per
// writer (each attempt, resume or rollback of a run opens its own):
//   events.out.tfevents.<unix time>.<host>.<n>     n = 1, 2, ... in the order they were opened
// Train and eval rows become scalars tagged "<kind>/<field>" ("train/loss", "eval/val_loss")
// at the row's step; event rows become text under "events/<event>" ("events/restart"; a
// straggler under "events/straggler/rank_<R>", one per rank); the resolved config is text
// "config" at step 0, written by the first writer of the run.
//
// No step is written twice, so TensorBoard draws one curve across restarts: on resume every
// earlier file is cut back to the steps <= the resume step (as MetricsLog cuts metrics.jsonl),
// and scalars at or below it are not written again. Used from one thread (MetricsLog's).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "trainrun/obs/metrics.h"

namespace trainrun {

class TensorBoardLog {
 public:
  // dir: RUN_DIR/tb (created). keep_through_step >= 0: resume, as above; < 0: a new run, which
  // removes the event files an earlier run left in dir. config_text: the resolved config.
  TensorBoardLog(const std::string& dir, int64_t keep_through_step, std::string config_text);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  // `kind` and `row` as MetricsLog::append. Throws Error when the file cannot be written.
  void append(const std::string& kind, const MetricRow& row);
  void flush();  // what was appended is readable by TensorBoard after this
  // This writer's file; it is created with the first record (a writer that logs nothing
  // leaves no file).
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t resumed_at_;                        // keep_through_step
  std::string config_text_;                   // written with the first record, then cleared
  std::map<std::string, int64_t> last_step_;  // per row kind: the newest step written
};

}  // namespace trainrun
