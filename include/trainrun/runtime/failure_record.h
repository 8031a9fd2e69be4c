// Failure records: a rank that ends badly says so itself, in RUN_DIR/logs/failure-rank-N.json
// (one flat JSON object, written to a temporary name and renamed, so a reader never sees half
// of one). The supervisor reads them to choose the job's exit code and name the culprit; what
// mpirun prints is only the fallback for ranks that could not write (SIGKILL, a lost host).
//
// The rank side is process-wide: arm_failure_record once at start, then any thread may call
// record_failure or note_phase. The first record of a process wins: later failures are
// usually consequences of the first (an abort after a watchdog report, say).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct FailureRecord {
  int rank = -1;
  std::string host;
  int64_t pid = 0;
  int exit_code = 1;      // the code this rank ends with (errors.h; 128+N for signal N)
  std::string cause;      // "error", "internal error", "watchdog", "signal", "stopped", "exit"
  std::string message;    // what the rank printed, one line
  int culprit_rank = -1;  // whom the writer blames: itself, unless its watchdog names another
  std::string culprit_host;
  std::string phase;  // the step phase when it failed ("startup", "forward", ...; "" unknown)
  int64_t step = -1;
  double time = 0;  // seconds since the Unix epoch
};

// RUN_DIR/logs/failure-rank-N.json
std::string failure_record_path(const std::string& run_dir, int rank);

// Writes the record atomically (temporary file + rename), creating RUN_DIR/logs. Returns false
// (and writes nothing) when the directory is not writable: a failing rank must not fail again.
bool write_failure_record(const std::string& run_dir, const FailureRecord& record);
// Every readable record of the run, by rank; unreadable or torn files are skipped.
std::vector<FailureRecord> read_failure_records(const std::string& run_dir);
// Removes every failure-rank-*.json (and leftover temporaries): before each (re)launch.
void clear_failure_records(const std::string& run_dir);

// --- The rank side ---------------------------------------------------------------------------

// From now on this process is rank `rank` of a job writing into run_dir: record_failure writes
// its record, and a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) writes one before
// the previous handler (or the default action) runs. Removes this rank's stale record. Call
// once, from the main thread, before other threads start.
void arm_failure_record(const std::string& run_dir, int rank);
// Writes this process's record unless it is not armed or already wrote one. culprit_rank < 0:
// this rank. Thread-safe.
void record_failure(int exit_code, const std::string& cause, const std::string& message,
                    int culprit_rank = -1, const std::string& culprit_host = "");
// The phase and step the rank is in, for its record (cheap: two atomic stores). `phase` must
// be a string literal of letters, digits and '_'.
void note_phase(const char* phase, int64_t step);

}  // namespace trainrun
