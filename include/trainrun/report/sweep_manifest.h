// A sweep directory's manifest, SWEEP_DIR/sweep.json: the config and overrides every point
// shares, and each point with its overrides and status. `trainrun sweep` writes it (src/sweep)
// and `trainrun compare` reads it, so the format lives here, below both (docs/sweeps.md).
// Not thread-safe; one sweep process owns a directory at a time (its lock, src/sweep).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/core/enum_names.h"

namespace trainrun {

inline constexpr const char* kSweepManifestFile = "sweep.json";

// pending: never started; running: started by a sweep process (still going when that process
// lives); done: exit 0; failed: any other exit; preempted: exit 75 (stopped after a checkpoint:
// `sweep --resume` continues it from there).
enum class PointStatus : uint8_t { pending, running, done, failed, preempted };
template <>
struct EnumNames<PointStatus> {
  static constexpr std::string_view names[] = {"pending", "running", "done", "failed", "preempted"};
  static_assert(std::size(names) == 1 + static_cast<size_t>(PointStatus::preempted));
};

// The status an attempt's exit code leaves: done for 0, preempted for 75 and 130 (stopped after
// a checkpoint, continued by a resume), failed for any other. One mapping for a sweep's points
// and for `trainrun runs` (run_index.h).
PointStatus status_of_exit(int code);

struct SweepPoint {
  std::string name;                    // its run directory, SWEEP_DIR/NAME
  std::vector<std::string> overrides;  // KEY=VALUE: the point's values of the axes
  PointStatus status = PointStatus::pending;
  int exit_code = -1;  // the last attempt's; -1 before the first ends
  int attempts = 0;
};

struct SweepManifest {
  std::string config;             // the config file every point trains, absolute
  std::vector<std::string> sets;  // --set KEY=VALUE applied to every point, before its own
  std::string axes;               // the command line's axes, for people ("--grid ... --seeds 2")
  std::vector<SweepPoint> points;
};

// Whether `dir` holds a manifest.
bool is_sweep_dir(const std::string& dir);
// Throws Error(kExitRunDir), exit 73, naming the file and what is wrong when it is missing, not
// a regular file of at most 16 MiB, or not a manifest.
SweepManifest read_sweep_manifest(const std::string& dir);
// Durably (core/durable_file.h): a reader sees the old manifest or the new one whole.
void write_sweep_manifest(const std::string& dir, const SweepManifest& m);

}  // namespace trainrun
