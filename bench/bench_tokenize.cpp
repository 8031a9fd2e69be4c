// Encoder throughput: build/bench/bench_tokenize TOKENIZER TEXT [THREADS] [MIN_MB] [SEGMENT_KB]
// The text is repeated in memory to at least MIN_MB (default 64) MB, cut into segments of about
// SEGMENT_KB (default 1024, as `data prepare`) at safe split boundaries and encoded by THREADS
// OpenMP threads, each segment one encode() call; prints MB/s in all and per thread, and MB per
// CPU-second. No disk in the timed part. bench/tokenize.sh runs it beside PyPI's
// tokenizers on the same text.
#include <fmt/format.h>
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../src/data/pretokenize.h"
#include "trainrun/data/tokenizer.h"

namespace {

double cpu_seconds() {  // user + system time of every thread of the process
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: {} TOKENIZER TEXT [THREADS] [MIN_MB] [SEGMENT_KB]\n", argv[0]);
    return 2;
  }
  const trainrun::Tokenizer tok = trainrun::Tokenizer::load(argv[1]);
  std::ifstream in(argv[2], std::ios::binary);
  const std::string one((std::istreambuf_iterator<char>(in)), {});
  const int threads = argc > 3 ? std::atoi(argv[3]) : omp_get_max_threads();
  const size_t min_bytes = (argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 64) << 20;
  const size_t segment = (argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 1024) << 10;
  if (one.empty()) return 2;
  std::string text;
  while (text.size() < min_bytes) text += one;
  std::vector<std::string_view> segs;
  for (size_t pos = 0; pos < text.size();) {
    size_t q = trainrun::next_safe_cut(text, pos + segment);
    if (q == std::string::npos) q = text.size();
    segs.push_back(std::string_view(text).substr(pos, q - pos));
    pos = q;
  }
  std::vector<std::vector<int32_t>> ids(segs.size());
  const auto n = static_cast<int64_t>(segs.size());
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i)
    tok.encode(segs[static_cast<size_t>(i)], ids[static_cast<size_t>(i)]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  size_t count = 0;
  for (const auto& v : ids) count += v.size();
  const double mbs = static_cast<double>(text.size()) / 1e6 / s;
  // MB per CPU-second: what one core does, whatever else the machine is running.
  fmt::print(
      "trainrun   threads={} segment={}KB bytes={} tokens={} seconds={:.2f} MB/s={:.1f} "
      "per-thread={:.1f} cpu-seconds={:.2f} MB/cpu-s={:.1f}\n",
      threads, segment >> 10, text.size(), count, s, mbs, mbs / threads, cpu,
      static_cast<double>(text.size()) / 1e6 / cpu);
  return 0;
}
