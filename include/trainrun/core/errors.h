// Error classes and the exit codes they map to (documented in man/trainrun.1, EXIT STATUS).
// Each failure class has its own code so scripts and the supervisor can tell them apart.
#pragma once

#include <stdexcept>
#include <string>

namespace trainrun {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,        // an unexpected internal error
  kExitUsage = 2,          // bad command line or bad config
  kExitData = 3,           // bad data: missing, wrong magic, truncated, token out of range
  kExitCheckpoint = 4,     // no usable checkpoint to resume from, or a damaged file inspected
  kExitDevice = 5,         // device: cuda requested but no usable GPU / plugin / driver
  kExitLaunch = 6,         // mpirun missing, not enough slots, or a rank failed
  kExitGaveUp = 7,         // fault tolerance gave up (restarts exhausted, repeated bad steps)
  kExitHang = 8,           // the watchdog aborted a hung job (a rank stalled or a collective hung)
  kExitRunDir = 73,        // the run directory is unusable: another run's, in use (EX_CANTCREAT)
  kExitWrite = 74,         // a checkpoint could not be written: disk full, I/O error (EX_IOERR)
  kExitResumeMe = 75,      // stopped by SIGTERM/SIGUSR1 after a checkpoint: resume me (EX_TEMPFAIL)
  kExitInterrupted = 130,  // stopped by SIGINT (after saving a checkpoint when enabled)
};

// An error that carries the exit code it should end the program with.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

struct ConfigError : Error {
  explicit ConfigError(const std::string& w) : Error(kExitUsage, w) {}
};
struct DataError : Error {
  explicit DataError(const std::string& w) : Error(kExitData, w) {}
};
struct CheckpointError : Error {
  explicit CheckpointError(const std::string& w) : Error(kExitCheckpoint, w) {}

 protected:
  CheckpointError(int code, const std::string& w) : Error(code, w) {}
};
// Writing a checkpoint failed (no space, an I/O error); the older checkpoints are intact.
struct CheckpointWriteError : CheckpointError {
  explicit CheckpointWriteError(const std::string& w) : CheckpointError(kExitWrite, w) {}
};
struct DeviceError : Error {
  explicit DeviceError(const std::string& w) : Error(kExitDevice, w) {}
};
struct LaunchError : Error {
  explicit LaunchError(const std::string& w) : Error(kExitLaunch, w) {}
};
struct RunDirError : Error {
  explicit RunDirError(const std::string& w) : Error(kExitRunDir, w) {}
};

}  // namespace trainrun
