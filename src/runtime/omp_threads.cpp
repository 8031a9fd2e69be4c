// A process's OpenMP thread count: the default per rank, and the bound on OMP_NUM_THREADS
// (trainrun/runtime/omp_threads.h).
#include "trainrun/runtime/omp_threads.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "trainrun/core/errors.h"
#include "trainrun/runtime/host.h"

namespace trainrun {

int default_omp_threads(int local_size) {
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v && *v) {
    // OpenMP reads a list ("8,4") for nested levels: the first entry is this level's.
    int n = std::atoi(v);
    if (n > 0) return n;
  }
  const int per_rank = available_cores() / (local_size > 0 ? local_size : 1);
  return std::clamp(per_rank, 1, kMaxThreads);  // a rank refuses more (check_omp_num_threads)
}

void check_omp_num_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return;
  const std::string value(v);
  size_t pos = 0;
  while (pos <= value.size()) {
    const size_t comma = std::min(value.find(',', pos), value.size());
    const std::string entry = value.substr(pos, comma - pos);
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(entry.c_str(), &end, 10);
    if (entry.empty() || *end != '\0' || errno != 0 || n < 1 || n > kMaxThreads)
      throw ConfigError(fmt::format(
          "OMP_NUM_THREADS={}: each entry must be a thread count from 1 to {}, the most trainrun "
          "runs (as for --threads); unset it to use every core, or set it lower",
          value, kMaxThreads));
    pos = comma + 1;
  }
}

}  // namespace trainrun
