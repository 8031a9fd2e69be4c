// open_dataset: turns data.{train,val,text,synthetic} into a TokenDataset for one split.
#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>

#include "document_index.h"
#include "manifest.h"
#include "open_shards.h"
#include "shard.h"
#include "split.h"
#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/markov.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Several shards read as one stream, in file-name order. With `documents`, each shard's document
// index is opened and checked where it has one; the stream has an index when every shard does.
class ShardStream final : public TokenDataset {
 public:
  ShardStream(const std::vector<std::string>& files, int vocab_size, bool documents = false,
              int64_t eot = -1) {
    starts_.push_back(0);
    indexed_ = documents;
    for (const auto& f : files) {
      shards_.push_back(std::make_unique<MappedShard>(f, vocab_size));
      starts_.push_back(starts_.back() + shards_.back()->num_tokens());
      std::unique_ptr<DocumentIndex> idx;
      std::error_code ec;
      if (const std::string p = document_index_path(f); documents && fs::exists(p, ec)) {
        idx = std::make_unique<DocumentIndex>(p, *shards_.back());
        if (eot >= 0 && idx->eot() != eot)
          throw DataError(fmt::format(
              "{}: the document index was written for end-of-text id {} but data.eot is {}; "
              "set data.eot: {} (or drop it), or prepare the shards again with --eot {}",
              p, idx->eot() < 0 ? "none" : std::to_string(idx->eot()), eot,
              idx->eot() < 0 ? "-1" : std::to_string(idx->eot()), eot));
      }
      indexed_ = indexed_ && idx != nullptr;
      indexes_.push_back(std::move(idx));
    }
  }
  bool has_document_index() const override { return indexed_; }
  void document_starts(int64_t pos, int64_t n, int32_t* out) const override {
    if (!indexed_ || pos < 0 || n < 0 || pos + n > num_tokens())
      throw std::logic_error("ShardStream::document_starts without an index or past the end");
    size_t s = shard_of(pos);
    int64_t doc = indexes_[s]->find(static_cast<uint64_t>(pos - starts_[s]));
    int64_t begin = starts_[s] + static_cast<int64_t>(indexes_[s]->start(doc));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = pos + i;
      while (p >= starts_[s + 1]) {  // the next shard begins a document
        ++s;
        doc = 0;
        begin = starts_[s];
      }
      while (doc + 1 < indexes_[s]->size() &&
             starts_[s] + static_cast<int64_t>(indexes_[s]->start(doc + 1)) <= p)
        begin = starts_[s] + static_cast<int64_t>(indexes_[s]->start(++doc));
      out[i] = static_cast<int32_t>(std::max<int64_t>(begin - pos, 0));
    }
  }
  int64_t num_tokens() const override { return starts_.back(); }
  void read(int64_t pos, int64_t n, int32_t* out) const override {
    if (pos < 0 || n < 0 || pos + n > num_tokens())
      throw std::out_of_range(
          fmt::format("read [{}, {}) past {} tokens", pos, pos + n, num_tokens()));
    size_t s = shard_of(pos);
    while (n > 0) {
      const int64_t off = pos - starts_[s];
      const int64_t take = std::min(n, shards_[s]->num_tokens() - off);
      shards_[s]->read(off, take, out);
      out += take;
      pos += take;
      n -= take;
      ++s;
    }
  }
  std::string describe() const override {
    return fmt::format("{} shard{}, {} tokens ({}{})", shards_.size(),
                       shards_.size() == 1 ? "" : "s", num_tokens(), shards_.front()->path(),
                       shards_.size() > 1 ? " ..." : "");
  }
  double entropy_rate() const override { return kNaN; }

 private:
  // The shard holding pos: the last start <= pos (skipping empty shards).
  size_t shard_of(int64_t pos) const {
    return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), pos) -
                               starts_.begin()) -
           1;
  }

  std::vector<std::unique_ptr<MappedShard>> shards_;
  std::vector<std::unique_ptr<DocumentIndex>> indexes_;  // null: the shard has none
  std::vector<int64_t> starts_;  // starts_[i] = first stream position of shard i; back() = total
  bool indexed_ = false;
};

// A contiguous part [begin, begin + n) of another dataset.
class Slice final : public TokenDataset {
 public:
  Slice(std::shared_ptr<const TokenDataset> base, int64_t begin, int64_t n, std::string what)
      : base_(std::move(base)), begin_(begin), n_(n), what_(std::move(what)) {}
  int64_t num_tokens() const override { return n_; }
  void read(int64_t pos, int64_t n, int32_t* out) const override {
    if (pos < 0 || n < 0 || pos + n > n_)
      throw std::out_of_range(fmt::format("read [{}, {}) past {} tokens", pos, pos + n, n_));
    base_->read(begin_ + pos, n, out);
  }
  std::string describe() const override {
    return fmt::format("{}: {} tokens of {}", what_, n_, base_->describe());
  }
  double entropy_rate() const override { return base_->entropy_rate(); }
  bool has_document_index() const override { return base_->has_document_index(); }
  void document_starts(int64_t pos, int64_t n, int32_t* out) const override {
    if (pos < 0 || n < 0 || pos + n > n_)
      throw std::out_of_range(fmt::format("documents [{}, {}) past {} tokens", pos, pos + n, n_));
    base_->document_starts(begin_ + pos, n, out);
  }

 private:
  std::shared_ptr<const TokenDataset> base_;
  int64_t begin_, n_;
  std::string what_;
};

// Bytes held in memory (data.text, the Markov source).
class ByteStream final : public TokenDataset {
 public:
  ByteStream(std::vector<uint8_t> bytes, std::string what, double entropy)
      : bytes_(std::move(bytes)), what_(std::move(what)), entropy_(entropy) {}
  int64_t num_tokens() const override { return static_cast<int64_t>(bytes_.size()); }
  void read(int64_t pos, int64_t n, int32_t* out) const override {
    if (pos < 0 || n < 0 || pos + n > num_tokens())
      throw std::out_of_range(
          fmt::format("read [{}, {}) past {} tokens", pos, pos + n, num_tokens()));
    for (int64_t i = 0; i < n; ++i) out[i] = bytes_[static_cast<size_t>(pos + i)];
  }
  std::string describe() const override { return what_; }
  double entropy_rate() const override { return entropy_; }

 private:
  std::vector<uint8_t> bytes_;
  std::string what_;
  double entropy_;
};

bool has_glob_chars(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

// A file, a directory (its *.bin files) or a glob, as a sorted list of files.
std::vector<std::string> resolve_files(const std::string& spec, const char* key) {
  std::vector<std::string> files;
  if (has_glob_chars(spec)) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), GLOB_ERR, nullptr, &g);  // sorted by glob(3)
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (!fs::is_directory(g.gl_pathv[i])) files.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    if (files.empty())
      throw DataError(
          fmt::format("no files match {}='{}': check the pattern (and quote it so the "
                      "shell does not expand it)",
                      key, spec));
    return files;
  }
  std::error_code ec;
  const auto st = fs::status(spec, ec);
  if (!fs::exists(st))
    throw DataError(
        fmt::format("{}='{}': no such file or directory; fix the path, or make shards "
                    "with `trainrun data prepare TEXT --out OUT_DIR`",
                    key, spec));
  if (fs::is_directory(st)) {
    for (const auto& e : fs::directory_iterator(spec, ec))
      if (e.path().extension() == ".bin" && !e.is_directory()) files.push_back(e.path().string());
    if (ec)
      throw DataError(
          fmt::format("{}='{}': cannot list the directory ({})", key, spec, ec.message()));
    if (files.empty())
      throw DataError(
          fmt::format("{}='{}' is a directory with no *.bin token shards in it; point "
                      "it at a shard file, a directory of shards or a glob",
                      key, spec));
    std::sort(files.begin(), files.end());
    return files;
  }
  files.push_back(spec);
  return files;
}

void check_fraction(double f) {
  if (!(f >= 0.0 && f < 1.0))
    throw DataError(fmt::format("data.val_fraction={} must be in [0, 1)", f));
}

std::unique_ptr<TokenDataset> tail_split(std::shared_ptr<const TokenDataset> all, Split split,
                                         double val_fraction, const std::string& source) {
  const int64_t total = all->num_tokens();
  const int64_t ntrain = train_length(total, val_fraction);
  if (split == Split::val && ntrain == total)
    throw DataError(
        fmt::format("{}: the val split is empty (data.val_fraction={} of {} tokens); "
                    "set data.val_fraction > 0{}",
                    source, val_fraction, total,
                    source.rfind("data.train", 0) == 0 ? " or data.val"
                    : source.rfind("data.mix", 0) == 0 ? " or the source's val"
                                                       : ""));
  if (split == Split::train && ntrain == 0)
    throw DataError(
        fmt::format("{}: the train split is empty ({} tokens, data.val_fraction={}); "
                    "use more data or a smaller data.val_fraction",
                    source, total, val_fraction));
  if (split == Split::train)
    return std::make_unique<Slice>(std::move(all), 0, ntrain,
                                   fmt::format("train: first {:g}%", 100 * (1 - val_fraction)));
  return std::make_unique<Slice>(std::move(all), ntrain, total - ntrain,
                                 fmt::format("val: last {:g}%", 100 * val_fraction));
}

// label names the file in messages: "data.text='x.txt'". The whole file is held in memory, so
// only a regular file of bounded size is read, and only the size it had when opened (a device
// such as /dev/zero, a FIFO or a growing log would otherwise be read forever).
constexpr int64_t kMaxTextBytes = int64_t{4} << 30;

std::vector<uint8_t> read_text(const std::string& path, const std::string& label) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw DataError(fmt::format("{}: cannot read the text file ({}); fix the path", label,
                                std::strerror(errno)));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw DataError(fmt::format("{}: cannot stat the text file ({})", label, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw DataError(fmt::format(
        "{}: not a regular file (a directory, device or FIFO); point it at a text file", label));
  if (st.st_size > kMaxTextBytes)
    throw DataError(fmt::format(
        "{}: {:.1f} GiB is more than data.text holds in memory ({} GiB); make token shards with "
        "`trainrun data prepare FILE --out DIR` and set data.train=DIR/train.bin instead",
        label, static_cast<double>(st.st_size) / (1 << 30), kMaxTextBytes >> 30));
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(fmt::format("{}: read error ({})", label, std::strerror(errno)));
    if (r == 0) break;  // shrank while reading: use what is there
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
  if (bytes.size() < 2) throw DataError(fmt::format("{}: the text file is (nearly) empty", label));
  return bytes;
}

}  // namespace

void TokenDataset::document_starts(int64_t, int64_t, int32_t*) const {
  throw std::logic_error(fmt::format("{} has no document index", describe()));
}

std::unique_ptr<TokenDataset> open_dataset(const DataConfig& data, Split split, int vocab_size,
                                           uint64_t seed) {
  const int sources = !data.train.empty() + !data.text.empty() + !data.synthetic.empty();
  if (sources == 0)
    throw DataError(
        "no data: set one of data.train (token shards), data.text (a text file) or "
        "data.synthetic: markov");
  if (sources > 1)
    throw DataError(
        fmt::format("set only one of data.train ('{}'), data.text ('{}') and "
                    "data.synthetic ('{}')",
                    data.train, data.text, data.synthetic));
  if (!data.val.empty() && data.train.empty())
    throw DataError(fmt::format("data.val='{}' needs data.train (token shards) as well", data.val));

  if (!data.synthetic.empty()) {
    if (data.synthetic != "markov")
      throw DataError(fmt::format("data.synthetic='{}' is not a built-in source (known: markov)",
                                  data.synthetic));
    if (data.markov_order != 1 && data.markov_order != 2)
      throw DataError(
          fmt::format("data.markov_order={} is not supported: use 1 or 2", data.markov_order));
    if (vocab_size < 2)
      throw DataError(
          fmt::format("data.synthetic: markov needs model.vocab_size >= 2 (got {})", vocab_size));
    if (data.synthetic_tokens < 2)
      throw DataError(fmt::format("data.synthetic_tokens={} is too small", data.synthetic_tokens));
    // The stream is generated whole, a byte a token: refuse one the machine cannot hold (half
    // its memory) before allocating it, instead of failing with bad_alloc or swapping.
    const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
    if (memory > 0 && double(data.synthetic_tokens) > memory / 2)
      throw DataError(fmt::format(
          "data.synthetic_tokens={} needs {:.1f} GiB of memory (a byte a token), more than half "
          "of this machine's {:.1f} GiB; use a smaller stream (the default is 2^20 tokens)",
          data.synthetic_tokens, double(data.synthetic_tokens) / (1 << 30), memory / (1 << 30)));
    check_fraction(data.val_fraction);
    const int alphabet = std::min(vocab_size, 256);
    const MarkovChain chain(alphabet, data.markov_order, seed);
    auto all = std::make_shared<ByteStream>(
        chain.generate(data.synthetic_tokens, seed),
        fmt::format("synthetic markov (order {}, {} symbols, seed {}): {} tokens, entropy rate "
                    "{:.4f} nats/token",
                    data.markov_order, alphabet, seed, data.synthetic_tokens, chain.entropy_rate()),
        chain.entropy_rate());
    return tail_split(std::move(all), split, data.val_fraction, "data.synthetic");
  }

  if (!data.text.empty()) {
    if (vocab_size < 256)
      throw DataError(
          fmt::format("data.text='{}' is byte-tokenized (256 symbols) but "
                      "model.vocab_size is {}: set model.vocab_size >= 256",
                      data.text, vocab_size));
    check_fraction(data.val_fraction);
    auto bytes = read_text(data.text, fmt::format("data.text='{}'", data.text));
    const auto n = bytes.size();
    auto all = std::make_shared<ByteStream>(std::move(bytes),
                                            fmt::format("text {} ({} bytes)", data.text, n), kNaN);
    return tail_split(std::move(all), split, data.val_fraction,
                      fmt::format("data.text='{}'", data.text));
  }

  return open_shards({data.train, "data.train", data.val, "data.val", data.tokenizer,
                      data.val_fraction, data.document_masking, data.eot},
                     split, vocab_size);
}

std::unique_ptr<TokenDataset> open_shards(const ShardSpec& spec, Split split, int vocab_size) {
  if (!spec.val.empty()) {
    const bool val = split == Split::val;
    const std::string& files_spec = val ? spec.val : spec.train;
    const std::string& key = val ? spec.val_key : spec.train_key;
    const auto files = resolve_files(files_spec, key.c_str());
    check_shard_manifests(files, vocab_size, spec.tokenizer);
    auto ds = std::make_unique<ShardStream>(files, vocab_size, spec.documents, spec.eot);
    if (ds->num_tokens() == 0)
      throw DataError(fmt::format("{}='{}': the shards hold no tokens", key, files_spec));
    return ds;
  }
  const auto files = resolve_files(spec.train, spec.train_key.c_str());
  // A directory that `data prepare` wrote (train.bin and val.bin, nothing else) carries its own
  // split. Read as one stream with its tail held out, val.bin's tokens would be trained on
  // whenever prepare's split (a piece boundary, in bytes) is not at exactly val_fraction of the
  // tokens, as with any tokenizer.
  if (std::error_code ec; fs::is_directory(spec.train, ec) && files.size() == 2 &&
                          fs::path(files[0]).filename() == "train.bin" &&
                          fs::path(files[1]).filename() == "val.bin") {
    ShardSpec by_file = spec;
    by_file.train = files[0];
    by_file.val = files[1];
    by_file.val_key = spec.train_key;
    return open_shards(by_file, split, vocab_size);
  }
  check_shard_manifests(files, vocab_size, spec.tokenizer);
  auto train = std::make_shared<ShardStream>(files, vocab_size, spec.documents, spec.eot);
  if (train->num_tokens() == 0)
    throw DataError(fmt::format("{}='{}': the shards hold no tokens", spec.train_key, spec.train));
  // No val shards: hold out the tail of the train stream.
  check_fraction(spec.val_fraction);
  return tail_split(std::move(train), split, spec.val_fraction,
                    fmt::format("{}='{}' (no {})", spec.train_key, spec.train, spec.val_key));
}

}  // namespace trainrun
