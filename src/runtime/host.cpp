// This host's cores and name (trainrun/runtime/host.h).
#include "trainrun/runtime/host.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <utility>

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

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 && buf[0] ? std::string(buf)
                                                         : std::string("localhost");
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return args;
}

}  // namespace trainrun
