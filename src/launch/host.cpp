#include "host.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "trainrun/core/errors.h"
#include "trainrun/launch/launch.h"

namespace trainrun {
namespace {

bool read_int(const std::string& path, int* out) {
  std::ifstream f(path);
  return static_cast<bool>(f >> *out);
}

}  // namespace

int available_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    std::set<std::pair<int, int>> cores;  // (package, core): hyperthreads share one
    bool ok = true;
    for (int cpu = 0; cpu < CPU_SETSIZE && ok; ++cpu) {
      if (!CPU_ISSET(cpu, &mask)) continue;
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      int package = 0, core = 0;
      ok = read_int(dir + "physical_package_id", &package) && read_int(dir + "core_id", &core);
      cores.emplace(package, core);
    }
    if (ok && !cores.empty()) return static_cast<int>(cores.size());
    if (int n = CPU_COUNT(&mask); n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  const std::string p = path;
  size_t pos = 0;
  for (;;) {
    const size_t colon = p.find(':', pos);
    const std::string dir =
        p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) return "";
    pos = colon + 1;
  }
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 && buf[0] ? std::string(buf)
                                                         : std::string("localhost");
}

std::string self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("trainrun") : p.string();
}

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
