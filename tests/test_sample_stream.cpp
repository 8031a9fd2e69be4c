// Sample orders and mixtures: the epoch shuffle is a permutation, blocks stay sequential, the
// blend meets its weights on every prefix, and a stream reads the window its place() names.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "../src/data/sample_order.h"
#include "temp_dir.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"
#include "trainrun/data/data.h"
#include "trainrun/data/sample_stream.h"

using namespace trainrun;

namespace {

// Tokens that say where they are: source s, position p -> s * 100000 + p.
struct Positions final : TokenDataset {
  int source;
  int64_t n;
  Positions(int s, int64_t len) : source(s), n(len) {}
  int64_t num_tokens() const override { return n; }
  void read(int64_t pos, int64_t count, int32_t* out) const override {
    REQUIRE(pos >= 0);
    REQUIRE(pos + count <= n);
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(source * 100000 + pos + i);
  }
  std::string describe() const override { return "positions"; }
  double entropy_rate() const override { return std::nan(""); }
};

std::unique_ptr<SampleStream> stream_of(const std::vector<std::pair<int64_t, double>>& sizes,
                                        DataOrder order, uint64_t seed, int T, int block = 1) {
  std::vector<SampleStream::Source> sources;
  for (size_t s = 0; s < sizes.size(); ++s)
    sources.push_back({std::string("s").append(std::to_string(s)), sizes[s].second,
                       std::make_shared<Positions>(static_cast<int>(s), sizes[s].first)});
  return std::make_unique<SampleStream>(std::move(sources), order, seed, T, block);
}

MixSource source(std::string path, double weight = 1, std::string name = "") {
  MixSource m;
  m.path = std::move(path);
  m.weight = weight;
  m.name = std::move(name);
  return m;
}

}  // namespace

TEST_CASE("permute: a bijection of [0, n) for every n, different for different keys") {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 17ull, 64ull, 1000ull, 4097ull}) {
    CAPTURE(n);
    std::vector<uint64_t> a(n), b(n);
    for (uint64_t x = 0; x < n; ++x) a[x] = permute(7, x, n), b[x] = permute(8, x, n);
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0ull);
    CHECK(sorted == ids);
    if (n >= 17) {
      CHECK(a != b);
      CHECK(a != ids);  // shuffled, not the identity
    }
  }
}

TEST_CASE("epochs: every window once per epoch, a new order each epoch, blocks read in sequence") {
  for (int64_t block : {1, 4, 7}) {
    CAPTURE(block);
    const int64_t n = 103;  // 103 = 14 blocks of 7 + 5 left over: the remainder comes last
    const EpochOrder order(42, n, block);
    std::vector<std::vector<int64_t>> epochs(3);
    for (int64_t k = 0; k < 3 * n; ++k) epochs[k / n].push_back(order.window(k));
    for (const auto& e : epochs) {
      CHECK(std::set<int64_t>(e.begin(), e.end()).size() == size_t(n));
      CHECK(*std::min_element(e.begin(), e.end()) == 0);
      CHECK(*std::max_element(e.begin(), e.end()) == n - 1);
    }
    CHECK(epochs[0] != epochs[1]);
    CHECK(epochs[1] != epochs[2]);
    const int64_t full = n / block * block;
    for (const auto& e : epochs) {
      for (int64_t i = 0; i < full; ++i) {
        // Within a block the windows follow each other; each block starts on a block boundary.
        if (i % block == 0)
          CHECK(e[i] % block == 0);
        else
          CHECK(e[i] == e[i - 1] + 1);
      }
      for (int64_t i = full; i < n; ++i) CHECK(e[i] == i);
    }
  }
}

TEST_CASE("blend: 10,000 samples within 1% of the weights, every prefix within 2 samples") {
  const std::vector<std::vector<double>> cases = {
      {0.7, 0.3}, {1, 1, 1}, {0.5, 0.3, 0.15, 0.05}, {3, 0.001, 1}, {0.2}};
  for (const auto& w : cases) {
    CAPTURE(w.size());
    const Blend blend(w);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<int64_t> seen(w.size(), 0);
    for (int64_t j = 0; j < 10000; ++j) {
      const auto p = blend.pick(j);
      REQUIRE(p.source < w.size());
      REQUIRE(p.k == seen[p.source]);  // k counts the source's own samples
      ++seen[p.source];
      for (size_t s = 0; s < w.size(); ++s)
        REQUIRE(std::abs(double(seen[s]) - w[s] / total * double(j + 1)) < 2.0);
    }
    CHECK(blend.counts(10000) == seen);
    for (size_t s = 0; s < w.size(); ++s)
      CHECK(std::abs(double(seen[s]) / 10000 - w[s] / total) < 0.01);
  }
  // Past one period the pattern repeats and k keeps counting.
  const Blend blend({0.6, 0.4});
  const int64_t P = Blend::kPeriod;
  const auto counts = blend.counts(3 * P + 5);
  CHECK(counts[0] + counts[1] == 3 * P + 5);
  CHECK(blend.pick(2 * P).k == 2 * blend.share(blend.pick(0).source));
  CHECK(blend.share(0) == std::llround(0.6 * double(P - 2)) + 1);
}

TEST_CASE("a mixture reads each sample from the source and window place() names") {
  const int T = 8;
  for (DataOrder order : {DataOrder::epochs, DataOrder::windows}) {
    const auto order_id = static_cast<int>(order);
    CAPTURE(order_id);
    const auto stream = stream_of({{1001, 0.5}, {409, 0.3}, {9, 0.2}}, order, 5, T);
    CHECK(stream->order() == order);
    CHECK(stream->epoch_samples(0) == 125);
    CHECK(stream->epoch_samples(2) == 1);
    std::vector<int32_t> window(T + 1);
    std::vector<int64_t> per(3, 0);
    for (int64_t j = 0; j < 2000; ++j) {
      const auto p = stream->place(j);
      stream->read(j, window.data());
      REQUIRE(window[0] == static_cast<int32_t>(p.source * 100000 + p.start));
      REQUIRE(window[T] == window[0] + T);  // seq_len + 1 tokens, in order
      REQUIRE(p.start + T < stream->source(p.source).data->num_tokens());
      if (order == DataOrder::epochs) REQUIRE(p.start % T == 0);
      ++per[p.source];
    }
    CHECK(stream->counts(2000) == per);
    // The smallest source has one window: it wraps every time it is read, and still reads it.
    CHECK(std::abs(per[2] - 400) <= 2);
  }
}

TEST_CASE("epochs order: one source covers every window once an epoch; seeds differ") {
  const int T = 16;
  const auto a = stream_of({{16 * 50 + 1, 1.0}}, DataOrder::epochs, 1, T);
  const auto b = stream_of({{16 * 50 + 1, 1.0}}, DataOrder::epochs, 2, T);
  std::set<int64_t> first, second;
  std::vector<int64_t> order_a, order_b;
  for (int64_t j = 0; j < 100; ++j) {
    (j < 50 ? first : second).insert(a->place(j).start);
    order_a.push_back(a->place(j).start);
    order_b.push_back(b->place(j).start);
  }
  CHECK(first.size() == 50);
  CHECK(second.size() == 50);
  CHECK(order_a != order_b);
}

TEST_CASE("windows order of one source: the hashed starts runs always had") {
  const int T = 8;
  const auto s = stream_of({{5000, 1.0}}, DataOrder::automatic, 42, T);
  CHECK(s->order() == DataOrder::windows);
  for (int64_t j = 0; j < 100; ++j)
    REQUIRE(s->place(j).start ==
            int64_t(hash_combine(splitmix64(42), uint64_t(j)) % uint64_t(5000 - T)));
  CHECK(stream_of({{100, 1}, {100, 1}}, DataOrder::automatic, 42, T)->order() == DataOrder::epochs);
}

TEST_CASE("mixture: names come from paths, and a source too short says which") {
  CHECK(mix_source_name(source("data/web/")) == "web");
  CHECK(mix_source_name(source("data/code/train_000.bin")) == "train_000");
  CHECK(mix_source_name(source("data/*.bin", 1, "books")) == "books");
  CHECK_THROWS_WITH_AS(stream_of({{100, 1}, {8, 1}}, DataOrder::epochs, 0, 8),
                       doctest::Contains("data.mix source 's1'"), DataError);
}

TEST_CASE("open_sample_stream: a data.mix of shard folders, and its errors name the source") {
  trainrun::testing::TempDir tmp;
  std::vector<int32_t> toks(3000);
  for (int i = 0; i < 3000; ++i) toks[size_t(i)] = i % 200;
  std::filesystem::create_directories(tmp / "web");
  std::filesystem::create_directories(tmp / "code");
  write_token_shard(tmp / "web/a.bin", toks, 256);
  write_token_shard(tmp / "code/a.bin", toks, 256);
  DataConfig d;
  d.mix = {source(tmp / "web", 3), source(tmp / "code", 1)};
  const auto train = open_sample_stream(d, Split::train, 256, 1, 16);
  REQUIRE(train->num_sources() == 2);
  CHECK(train->source(0).name == "web");
  CHECK(train->source(0).data->num_tokens() == 2700);  // the tail 10% is val
  CHECK(open_sample_stream(d, Split::val, 256, 1, 16)->source(1).data->num_tokens() == 300);
  CHECK(train->describe().find("web 75.0%") != std::string::npos);
  d.mix[1].path = tmp / "nope";
  CHECK_THROWS_WITH_AS(open_sample_stream(d, Split::train, 256, 1, 16),
                       doctest::Contains("data.mix[1].path="), DataError);
  d.mix[1] = source(tmp / "code", 1, "web");
  CHECK_THROWS_WITH_AS(open_sample_stream(d, Split::train, 256, 1, 16),
                       doctest::Contains("two sources are named 'web'"), DataError);
}
