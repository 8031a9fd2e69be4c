// measure_gemm_peak_gflops: the fp32 GEMM rate this backend reaches now, for MFU and
// `trainrun plan`. Written over the Backend interface (alloc, fill, matmul, synchronize), so it
// measures whichever backend it is given with that backend's own GEMM. One warm-up call, then
// timed calls for about a quarter of a second; the best call is reported because the machines
// are noisy (~15%) and the peak, not the average interference, is what MFU divides by. A
// warm-up that alone takes the quarter second (a slow device: the CPU-executed CUDA device
// needs about 0.6 s for 1024^3) is the measurement: its one-time costs are small beside it, and
// three more calls would add seconds to every start for what is only MFU's denominator.
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "trainrun/backend/backend.h"
#include "trainrun/core/clock.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"

namespace trainrun {

double measure_gemm_peak_gflops(Backend& be, int size) {
  if (size <= 0)
    throw std::invalid_argument(fmt::format("measure_gemm_peak_gflops: size {} <= 0", size));
  const int64_t n = size;
  const Device dev = be.device();
  const size_t bytes = static_cast<size_t>(n * n) * sizeof(float);
  void* a = be.alloc(bytes);
  void* b = be.alloc(bytes);
  void* c = be.alloc(bytes);
  Tensor A(a, DType::f32, dev, {n, n}), B(b, DType::f32, dev, {n, n}),
      C(c, DType::f32, dev, {n, n});
  double best = 0;
  try {
    constexpr double kBudget = 0.25;  // seconds of timed calls
    be.fill(A, 0.5);
    be.fill(B, 0.25);
    be.synchronize();
    const double flop = 2.0 * static_cast<double>(n) * n * n;
    const double warm0 = now();
    be.matmul(C, A, B, Tensor());
    be.synchronize();
    const double warm = now() - warm0;
    const bool slow = warm >= kBudget;
    if (slow) best = flop / warm * 1e-9;
    const double until = now() + kBudget;
    for (int it = 0; !slow && (it < 3 || now() < until); ++it) {
      const double t0 = now();
      be.matmul(C, A, B, Tensor());
      be.synchronize();
      const double s = now() - t0;
      best = std::max(best, flop / s * 1e-9);
    }
  } catch (...) {
    be.release(a);
    be.release(b);
    be.release(c);
    throw;
  }
  be.release(a);
  be.release(b);
  be.release(c);
  return best;
}

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown cpu";
}

// One line per key: "KEY\tGFLOPS". Keys hold no tabs or newlines (describe() and a CPU name).
std::map<std::string, double> read_cache(const std::string& file) {
  std::map<std::string, double> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.rfind('\t');
    if (tab == std::string::npos) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + tab + 1, &end);
    if (end != line.c_str() + tab + 1 && v > 0 && v < 1e9) out[line.substr(0, tab)] = v;
  }
  return out;
}

void write_cache(const std::string& file, const std::map<std::string, double>& entries) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), ec);
  std::string text;
  for (const auto& [key, v] : entries) text += fmt::format("{}\t{:.3f}\n", key, v);
  try {
    replace_file(file, text);  // a link at the cache's name is replaced, never written through
  } catch (const Error&) {
    // Only a cache: the next run measures again.
  }
}

}  // namespace

GemmPeak gemm_peak(Backend& be, int size, const std::string& cache_file) {
  const double now_gflops = measure_gemm_peak_gflops(be, size);
  GemmPeak p{now_gflops, fmt::format("measured now, {} GEMM", size)};
  if (cache_file.empty()) return p;
  std::string key = fmt::format("{} | {} | {}^3", be.describe(), cpu_model(), size);
  std::replace(key.begin(), key.end(), '\t', ' ');
  auto entries = read_cache(cache_file);
  const auto it = entries.find(key);
  if (it != entries.end() && it->second > now_gflops) {
    p = {it->second,
         fmt::format("best measured on this machine ({}; now {:.1f})", cache_file, now_gflops)};
  } else {
    entries[key] = now_gflops;
    write_cache(cache_file, entries);
    p.source += fmt::format(", the best so far here (kept in {})", cache_file);
  }
  return p;
}

std::string default_gemm_peak_cache() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return (std::filesystem::path(x) / "trainrun" / "gemm-peak.tsv").string();
  if (const char* h = std::getenv("HOME"); h && *h)
    return (std::filesystem::path(h) / ".cache" / "trainrun" / "gemm-peak.tsv").string();
  return "";
}

}  // namespace trainrun
