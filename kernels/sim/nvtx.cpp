// The sim's NVTX (include/nvtx3/nvToolsExt.h): per-thread range stacks, checked, and summarised
// at exit into $TRAINRUN_SIM_NVTX_SUMMARY when it is set (one "key value" per line:
// "range NAME COUNT", "max_depth N", "unmatched_pops N", "open_at_exit N"), so a test can hold
// the plugin's ranges to what docs/cuda.md says nsys will show.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Summary {
  std::mutex mu;
  std::map<std::string, long> opened;
  int max_depth = 0;
  long unmatched_pops = 0;
  long open = 0;  // pushed and not popped, every thread

  ~Summary() {
    const char* path = std::getenv("TRAINRUN_SIM_NVTX_SUMMARY");
    if (!path || !*path) return;
    FILE* f = std::fopen(path, "w");
    if (!f) return;
    for (const auto& [name, n] : opened) std::fprintf(f, "range %s %ld\n", name.c_str(), n);
    std::fprintf(f, "max_depth %d\nunmatched_pops %ld\nopen_at_exit %ld\n", max_depth,
                 unmatched_pops, open);
    std::fclose(f);
  }
};

Summary& summary() {
  static Summary s;
  return s;
}

thread_local std::vector<std::string> stack;

}  // namespace

extern "C" int nvtxRangePushA(const char* message) {
  stack.emplace_back(message ? message : "");
  const int depth = static_cast<int>(stack.size()) - 1;
  Summary& s = summary();
  const std::lock_guard<std::mutex> lock(s.mu);
  ++s.opened[stack.back()];
  if (depth + 1 > s.max_depth) s.max_depth = depth + 1;
  ++s.open;
  return depth;
}

extern "C" int nvtxRangePop() {
  Summary& s = summary();
  const std::lock_guard<std::mutex> lock(s.mu);
  if (stack.empty()) {
    ++s.unmatched_pops;
    std::fprintf(stderr, "cudasim: nvtx: nvtxRangePop with no range open on this thread\n");
    return -1;
  }
  stack.pop_back();
  --s.open;
  return static_cast<int>(stack.size());
}
