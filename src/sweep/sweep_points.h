// The points of a sweep, from its axes: private to src/sweep.
//   --grid KEY=V1,V2,...   values as --set parses them (YAML), split at the commas outside
//                          brackets, braces, parentheses and quotes; several --grid form the
//                          product, the first outermost (Hydra's order)
//   --list                 the --grid axes zipped instead (all of one length)
//   --random KEY=loguniform(A,B) | uniform(A,B) | choice(V1,V2,...)  with --trials N and
//                          --sweep-seed S: N draws of every random axis (a counter-based
//                          generator: the same seed gives the same points on any machine)
//   --seeds N              the config's seed, seed+1, ..., innermost, so one setting's seeds
//                          are neighbours
// The grid (or list), the trials and the seeds multiply. Each point is its overrides, KEY=VALUE
// in axis order, and a name: its directory in the sweep, made from them (readable, safe in a
// path and a shell, unique within the sweep).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun::sweep {

// A grid axis whose values are already apart (a sweep file's YAML list).
struct GridAxis {
  std::string key;
  std::vector<std::string> values;
};

struct Axes {
  std::vector<GridAxis> listed;     // a sweep file's grid, before the --grid arguments
  std::vector<std::string> grid;    // --grid arguments
  bool list = false;                // --list
  std::vector<std::string> random;  // --random arguments
  int trials = 0;                   // --trials (0: 1 when there are random axes)
  uint64_t sweep_seed = 0;          // --sweep-seed
  int seeds = 0;                    // --seeds (0: no seed axis)
};

struct Point {
  std::string name;
  std::vector<std::string> overrides;  // KEY=VALUE
};

// Throws ConfigError (exit 2) naming the argument: no '=', an empty key, an empty value list or
// value, an unknown distribution or bad bounds, --list axes of different lengths, --trials
// without random axes, no axis at all. base_seed: the config's seed (--seeds counts from it).
std::vector<Point> expand(const Axes& axes, uint64_t base_seed);

// The command line's axes as one line, for the manifest.
std::string describe(const Axes& axes);

}  // namespace trainrun::sweep
