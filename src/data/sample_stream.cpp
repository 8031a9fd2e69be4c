// SampleStream: a blend over sources, and per source an order (sample_order.h) that places its
// k-th sample.
#include "trainrun/data/sample_stream.h"

#include <fmt/format.h>

#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>
#include <variant>

#include "manifest.h"
#include "open_shards.h"
#include "sample_order.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"

namespace trainrun {

namespace {

// A source in windows order: hashed starts (the sampling trainrun always had).
struct Windows {
  uint64_t key;
  int64_t starts;
};

struct PerSource {
  std::variant<Windows, EpochOrder> order;
  int64_t epoch_samples;
};

}  // namespace

struct SampleStream::Impl {
  std::vector<Source> sources;
  std::vector<PerSource> per;
  DataOrder order;
  int seq_len;
  std::optional<Blend> blend;  // only with several sources
};

SampleStream::SampleStream(std::vector<Source> sources, DataOrder order, uint64_t seed, int seq_len,
                           int shuffle_block)
    : impl_(std::make_unique<Impl>()) {
  if (sources.empty()) throw std::invalid_argument("SampleStream: no sources");
  if (seq_len < 1) throw DataError(fmt::format("model.seq_len={} must be at least 1", seq_len));
  if (order == DataOrder::automatic)
    order = sources.size() > 1 ? DataOrder::epochs : DataOrder::windows;
  const bool single = sources.size() == 1;
  const int64_t T = seq_len;
  for (const auto& src : sources) {
    const int64_t n = src.data->num_tokens();
    if (n < T + 1)
      throw DataError(
          fmt::format("{}{}: {} tokens, fewer than model.seq_len + 1 = {}; use more "
                      "data or a smaller model.seq_len",
                      single ? "" : fmt::format("data.mix source '{}': ", src.name),
                      src.data->describe(), n, T + 1));
    // One source keeps the key it always had; a mixture's sources are keyed by name, so listing
    // them in another order changes no source's own order.
    const uint64_t key = single ? splitmix64(seed) : hash_combine(seed, hash_string(src.name));
    const int64_t windows = (n - 1) / T;
    if (order == DataOrder::windows)
      impl_->per.push_back({Windows{key, n - T}, windows});
    else
      impl_->per.push_back({EpochOrder(key, windows, shuffle_block), windows});
  }
  if (!single) {
    std::vector<double> weights;
    for (const auto& s : sources) weights.push_back(s.weight);
    impl_->blend.emplace(weights);
  }
  impl_->sources = std::move(sources);
  impl_->order = order;
  impl_->seq_len = seq_len;
}

SampleStream::~SampleStream() = default;

int SampleStream::seq_len() const {
  return impl_->seq_len;
}
DataOrder SampleStream::order() const {
  return impl_->order;
}
size_t SampleStream::num_sources() const {
  return impl_->sources.size();
}
const SampleStream::Source& SampleStream::source(size_t s) const {
  return impl_->sources.at(s);
}
int64_t SampleStream::epoch_samples(size_t s) const {
  return impl_->per.at(s).epoch_samples;
}

SampleStream::Place SampleStream::place(int64_t j) const {
  if (j < 0) throw std::invalid_argument(fmt::format("SampleStream: sample {}", j));
  size_t s = 0;
  int64_t k = j;
  if (impl_->blend) {
    const auto p = impl_->blend->pick(j);
    s = p.source;
    k = p.k;
  }
  const auto& order = impl_->per[s].order;
  const int64_t start =
      std::holds_alternative<Windows>(order)
          ? window_start(std::get<Windows>(order).key, k, std::get<Windows>(order).starts)
          : std::get<EpochOrder>(order).window(k) * impl_->seq_len;
  return {s, k, start};
}

void SampleStream::read(int64_t j, int32_t* window) const {
  const auto p = place(j);
  impl_->sources[p.source].data->read(p.start, impl_->seq_len + 1, window);
}

bool SampleStream::has_document_index() const {
  for (const auto& s : impl_->sources)
    if (!s.data->has_document_index()) return false;
  return true;
}

void SampleStream::document_starts(int64_t j, int32_t* out) const {
  const auto p = place(j);
  impl_->sources[p.source].data->document_starts(p.start, impl_->seq_len, out);
}

std::vector<int64_t> SampleStream::counts(int64_t n) const {
  if (impl_->blend) return impl_->blend->counts(n);
  return {n};
}

std::string SampleStream::describe() const {
  if (!impl_->blend) return impl_->sources[0].data->describe();
  double total = 0;
  for (const auto& s : impl_->sources) total += s.weight;
  std::string out =
      fmt::format("mixture of {} sources, order {}:", impl_->sources.size(), impl_->order);
  for (size_t s = 0; s < impl_->sources.size(); ++s)
    out +=
        fmt::format(" {} {:.1f}% ({} samples an epoch: {}){}", impl_->sources[s].name,
                    100 * impl_->sources[s].weight / total, impl_->per[s].epoch_samples,
                    impl_->sources[s].data->describe(), s + 1 < impl_->sources.size() ? ";" : "");
  return out;
}

double SampleStream::entropy_rate() const {
  if (impl_->blend) return std::numeric_limits<double>::quiet_NaN();
  return impl_->sources[0].data->entropy_rate();
}

std::vector<int64_t> mix_counts(const std::vector<double>& weights, int64_t n) {
  if (weights.size() == 1) return {n};
  return Blend(weights).counts(n);
}

std::string mix_source_name(const MixSource& source) {
  if (!source.name.empty()) return source.name;
  std::filesystem::path p(source.path);
  while (!p.empty() && (p.filename().empty() || p.filename() == "."))
    p = p.parent_path();  // data/web/ names "web"
  std::string name = p.filename().string();
  if (p.extension() == ".bin") name = p.stem().string();
  return name.empty() ? source.path : name;
}

std::unique_ptr<SampleStream> open_sample_stream(const DataConfig& data, Split split,
                                                 int vocab_size, uint64_t seed, int seq_len) {
  std::vector<SampleStream::Source> sources;
  if (data.mix.empty()) {
    sources.push_back({"data", 1.0, open_dataset(data, split, vocab_size, seed)});
  } else {
    if (data.mix.size() > Blend::kMaxSources)
      throw DataError(fmt::format("data.mix has {} sources, more than {}: merge some of them",
                                  data.mix.size(), Blend::kMaxSources));
    for (size_t i = 0; i < data.mix.size(); ++i) {
      const auto& m = data.mix[i];
      const std::string name = mix_source_name(m);
      for (const auto& earlier : sources)
        if (earlier.name == name)
          throw DataError(fmt::format(
              "data.mix: two sources are named '{}': give them distinct `name`s", name));
      const std::string at = fmt::format("data.mix[{}]", i);
      sources.push_back({name, m.weight,
                         open_shards({m.path, at + ".path", m.val, at + ".val", data.tokenizer,
                                      data.val_fraction, data.document_masking, data.eot},
                                     split, vocab_size)});
    }
    std::vector<std::pair<std::string, std::string>> specs;
    for (size_t i = 0; i < data.mix.size(); ++i)
      specs.emplace_back(sources[i].name, data.mix[i].path);
    check_one_tokenizer(specs);
  }
  // The data is the run's (the Markov chain of its seed); val's samples have an order of their
  // own, so that validation does not read the windows training starts with.
  const uint64_t order_seed = split == Split::val ? hash_combine(seed, 0x7661ull) : seed;
  return std::make_unique<SampleStream>(std::move(sources), data.order, order_seed, seq_len,
                                        data.shuffle_block);
}

}  // namespace trainrun
