// build/bench/bench_loader SHARDS SEQ_LEN SAMPLES [windows|epochs] [SHUFFLE_BLOCK]: how fast the
// data loader reads samples of token shards (a file, directory or glob), on one thread as a
// rank's loader does: samples/s and MB/s of token bytes delivered. bench/data_corpus.sh runs it
// cold and warm beside dd. Figures only.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainrun/core/enum_names.h"
#include "trainrun/data/data.h"
#include "trainrun/data/sample_stream.h"

using namespace trainrun;

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} SHARDS SEQ_LEN SAMPLES [windows|epochs] [SHUFFLE_BLOCK]\n",
               argv[0]);
    return 2;
  }
  DataConfig d;
  d.train = argv[1];
  d.val_fraction = 0.001;
  const int T = std::atoi(argv[2]);
  const int64_t samples = std::atoll(argv[3]);
  d.order = argc > 4 ? enum_from_name<DataOrder>(argv[4]).value_or(DataOrder::windows)
                     : DataOrder::windows;
  d.shuffle_block = argc > 5 ? std::atoi(argv[5]) : 1;
  const auto t_open = std::chrono::steady_clock::now();
  const auto stream = open_sample_stream(d, Split::train, 65536, 1, T);
  const double open_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open).count();
  DataLoader loader(*stream);
  const int batch = 64;
  std::vector<int32_t> x(static_cast<size_t>(batch) * T), y(x.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t j = 0; j < samples; j += batch) loader.fetch(j, batch, x.data(), y.data());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bytes = double(samples) * (T + 1) * 2;  // u16 tokens
  fmt::print(
      "order {} block {}: open {:.3f} s, {} samples of {} tokens in {:.2f} s: {:.0f} samples/s, "
      "{:.1f} MB/s\n",
      d.order, d.shuffle_block, open_s, samples, T + 1, s, double(samples) / s, bytes / s / 1e6);
  return 0;
}
