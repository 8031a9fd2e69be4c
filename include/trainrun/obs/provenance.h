// A run's provenance, RUN_DIR/provenance.json: what made it and how each attempt went. The
// job's owner (the launching trainrun, or rank 0 of a job srun or mpirun started) begins an
// attempt when it claims the run directory and ends it with the exit code; `trainrun runs`
// and `trainrun reproduce` read it. Written durably (a reader sees the old file or the new one
// whole); an attempt whose process was killed has no end. Not thread-safe: the owner writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainrun {

inline constexpr const char* kProvenanceFile = "provenance.json";

struct ProvenanceAttempt {
  std::string trainrun_version;  // build_info.h: release + source commit
  std::string source_commit;
  std::string config_hash;           // 16 hex digits: the resolved config's hash, run_dir left out
  std::vector<std::string> command;  // the owner's argv
  std::vector<std::string> hosts;    // where the ranks ran, as far as the owner knows
  std::string started, ended;        // ISO 8601 local time; ended "" while going or killed
  std::optional<int> exit_code;      // absent while going or killed
};

struct Provenance {
  std::vector<ProvenanceAttempt> attempts;  // oldest first; the run's first is its start
};

// nullopt when the run directory has none (a run from before provenance, or a foreign one).
// Throws Error(kExitRunDir) naming the file when it is there but not a provenance record.
std::optional<Provenance> read_provenance(const std::string& run_dir);
void write_provenance(const std::string& run_dir, const Provenance& p);

// The hash of a resolved config's text, as config_hash records it.
std::string config_hash(const std::string& resolved_yaml);

}  // namespace trainrun
