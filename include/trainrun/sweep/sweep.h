// `trainrun sweep CONFIG`: many runs of one config over axes of values (src/sweep/
// sweep_points.h), each point validated and planned before the first starts, then trained one
// after another or K side by side, each in its own run directory under the sweep directory,
// with its status kept in the sweep's manifest (report/sweep_manifest.h); `--resume` runs the
// points that are not done. docs/sweeps.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct SweepRequest {
  std::string config;               // CONFIG.yaml
  std::vector<std::string> sets;    // --set KEY=VALUE for every point
  std::vector<std::string> grid;    // --grid KEY=V1,V2,...
  bool list = false;                // --list: zip the grid axes
  std::vector<std::string> random;  // --random KEY=DIST
  int trials = 0;                   // --trials N
  uint64_t sweep_seed = 0;          // --sweep-seed S
  int seeds = 0;                    // --seeds N
  std::string sweep_file;           // --sweep-file: axes (and --set) from a YAML file
  std::string sweep_dir;            // --sweep-dir ("" = runs/NAME-sweep)
  std::string resume;               // --resume SWEEP_DIR: continue that sweep instead
  int parallel = 1;                 // --parallel K
  bool dry_run = false;             // print the points, start nothing, write nothing
  bool slurm = false;               // --slurm: write one sbatch job array instead of running
  bool submit = false;              // --submit: and submit it
};

// Runs the sweep and returns its exit code: 0 when every point is done; 75 (or 130 on SIGINT)
// when a signal stopped it (each running point was passed the signal and stops after its
// checkpoint: `sweep --resume` continues); otherwise the exit code of the first point that
// failed (the others still ran). Throws ConfigError (exit 2) naming the point for an axis or
// value a config refuses, two points that are one config, or a point that does not fit the
// device, all before anything runs; Error(kExitRunDir) (73) for a sweep directory that holds
// another sweep or other files, or is in use by another sweep process.
int run_sweep(const SweepRequest& request);

}  // namespace trainrun
