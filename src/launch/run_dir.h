// The run directory belongs to one run, and while that run goes on, to one process.
//
// - trainrun knows its own directories: they hold its lock file, or only names it writes
//   (config.yaml with checkpoints/, logs/, metrics.*, ...). Anything else is a user's.
// - A new run starts only in a directory that is missing, empty, or trainrun's without a run
//   in it (a start that failed); --new first moves the earlier run's files into
//   RUN_DIR/archive-TIME/. Nothing here ever deletes.
// - An exclusive flock on RUN_DIR/.trainrun.lock, taken by the process that owns the job (the
//   launching trainrun, or rank 0 of a job srun or mpirun started) and released by the kernel
//   when that process ends, however it ends. The file says who holds it (pid, host, since).
//
// Internal to src/launch. Not thread-safe: the owner claims its directory once, at start.
#pragma once

#include <optional>
#include <string>

#include "trainrun/launch/run_command.h"

namespace trainrun {

inline constexpr const char* kRunDirLockFile = ".trainrun.lock";

enum class RunDirKind {
  missing,  // nothing there yet
  empty,    // an empty directory
  unused,   // trainrun's, but no run trained in it (a start that failed)
  run,      // holds a run: checkpoints or metrics
  foreign,  // holds files trainrun does not write
};

struct RunDirState {
  RunDirKind kind = RunDirKind::missing;
  std::string what;  // for messages: "checkpoints up to step 40", "notes.txt, data and 2 more"
  bool locked_once = false;  // holds the lock file: a directory trainrun made
  bool others = false;       // holds names trainrun does not write
  bool checkpoints = false;  // kind run: it holds checkpoints (else only an attempt's metrics)
};

// What `dir` holds. Throws RunDirError when it exists but is not a directory, or is unreadable.
RunDirState inspect_run_dir(const std::string& dir);

// Throws RunDirError, saying what to do instead, unless `use` may go ahead in a directory in
// `state`. With `renew` (--new) a directory holding a run or other files may be started in.
void check_run_dir_use(const std::string& dir, const RunDirState& state, RunDirUse use, bool renew);

// The exclusive lock on a run directory, held while the object lives; movable.
class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // Creates `dir` (and its parents) when missing, then locks it. Throws RunDirError naming the
  // holder when another process holds the lock, or saying why the directory is unusable (a
  // file, not writable, a name too long).
  static RunDirLock take(const std::string& dir);
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // close-on-exec: the job's processes never inherit the lock
};

// Who holds the lock on `dir` ("pid 12 on host7 since ..."), or "" when nobody does. Reads only.
std::string run_dir_lock_holder(const std::string& dir);
// Throws RunDirError naming the holder when another process holds the lock on `dir`.
void check_not_in_use(const std::string& dir);

// Moves every file trainrun writes in `dir` into dir/archive-YYYYmmdd-HHMMSS/ and returns that
// path ("" when there was nothing to move). Other files stay where they are.
std::string archive_run(const std::string& dir);

// What a job's owner does before its first write: inspect, check the use, create, lock, look
// again under the lock, and archive (renew; or restart over an earlier attempt's files, which
// are kept, not overwritten). Prints where an archive went.
RunDirLock claim_run_dir(const std::string& dir, RunDirUse use, bool renew);
// --dry-run's look at the directory, which writes nothing and so refuses nothing a real run
// could go on from: the refusal (exit 73) a real run would meet here (it holds a run, other
// files, another trainrun's lock; this user cannot write it or create it), or "" when a real run
// would go ahead. Throws RunDirError
// only for a path that no run could use (a file, unreadable). The lock is only looked at.
std::string run_dir_objection(const std::string& dir, RunDirUse use, bool renew);

// The run directory a checkpoint file lies in (RUN_DIR/checkpoints/FILE, RUN_DIR holding a run
// and either trainrun's lock file or nothing but trainrun's files), or nullopt for a file
// elsewhere, a user's folder of checkpoints among other files included.
std::optional<std::string> run_dir_of_checkpoint(const std::string& file);

}  // namespace trainrun
