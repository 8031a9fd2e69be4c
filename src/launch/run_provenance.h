// The job owner's side of a run's provenance record (obs/provenance.h): an attempt begun when
// the owner has claimed the run directory, and ended with the job's exit code. Internal to
// src/launch. Not thread-safe: the owner's one thread uses it.
#pragma once

#include <optional>

#include "trainrun/core/experiment.h"
#include "trainrun/obs/provenance.h"

namespace trainrun {

class AttemptRecord {
 public:
  // Appends this attempt (this binary's version and commit, the resolved config's hash, this
  // process's command line, the hosts) to RUN_DIR/provenance.json. A record that cannot be
  // written is a warning: provenance never stops a run.
  explicit AttemptRecord(const Experiment& exp);
  // Records the end; the first call counts.
  void end(int exit_code);

 private:
  std::string run_dir_;
  std::optional<Provenance> record_;  // what was written; empty when the write failed
};

}  // namespace trainrun
