// What state a run directory is in, and `trainrun runs [DIR]`: the runs under a directory, one
// line each (name, status, steps, best val loss, last update, sweep membership), read from
// their files as `report` reads them.
#pragma once

#include <cstdint>
#include <string>

#include "trainrun/report/sweep_manifest.h"

namespace trainrun {

// Whether `dir` holds a run (its config.yaml or metrics.jsonl), as compare and runs count one.
bool is_run_dir(const std::string& dir);

// A run's state, from the most direct evidence: its owner holding the run directory's lock
// (running); the end of the last attempt in its provenance record (exit 0 done, 75 or 130
// preempted, else failed); a sweep's manifest for its point; an attempt without an end (its
// owner was killed: stopped); without any of these, whether its steps reached train.steps (done,
// else stopped; nothing logged: empty).
struct RunStatus {
  enum Kind { running, done, failed, preempted, pending, stopped, empty } kind = empty;
  int exit_code = -1;  // failed: the code
};
// steps_done: the last logged step (-1 none); train_steps: the config's (-1 unknown).
RunStatus run_status(const std::string& run_dir, const SweepPoint* point, int64_t steps_done,
                     int64_t train_steps);
// "done", "failed (9)", ...; `running` as given ("running", or compare's "live").
std::string status_text(const RunStatus& s, const char* running = "running");

// `trainrun runs`: the run directories in `dir` and in the sweep directories there (their
// points, with the sweep's name), sorted by name; text, or JSON with `json`. Throws ConfigError
// (exit 2) when `dir` is not a directory.
std::string list_runs(const std::string& dir, bool json);

}  // namespace trainrun
