// A sweep's axes from a YAML file (`trainrun sweep CONFIG --sweep-file FILE`), private to
// src/sweep:
//   sweep:
//     grid:                      # each key's list of values, as --grid gives them
//       optimizer.lr: [1e-3, 3e-3]
//       data.mix: [[a, b], [c]]  # a value may be any YAML (a list here)
//     list: false                # --list
//     random:                    # as --random
//       optimizer.weight_decay: loguniform(1e-3, 1e-1)
//     trials: 4                  # --trials
//     sweep_seed: 0              # --sweep-seed
//     seeds: 3                   # --seeds
//     set:                       # --set, for every point
//       train.steps: 200
// What the command line gives is added to (axes, --set) or wins over (the counts) the file's.
#pragma once

#include <string>
#include <vector>

#include "sweep_points.h"

namespace trainrun::sweep {

// Fills `axes` and `sets` from the file. Throws ConfigError (exit 2) naming the file, line and
// key for anything else in it (an unknown key, a grid value that is not a list, a count that is
// not a whole number), and Error (exit 2) when the file is missing or not a regular file.
void read_sweep_file(const std::string& path, Axes& axes, std::vector<std::string>& sets);

}  // namespace trainrun::sweep
