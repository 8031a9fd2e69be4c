// Writing and reading document indexes (document_index.h).
#include "document_index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "shard.h"
#include "trainrun/core/crc32c.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {

namespace fs = std::filesystem;

namespace {

// Starts of the documents of a shard that has `eot` between them: 0 and after every eot.
std::vector<uint64_t> scan_for_eot(const MappedShard& shard, int64_t eot) {
  std::vector<uint64_t> starts = {0};
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<int32_t> ids(static_cast<size_t>(std::min(kChunk, shard.num_tokens())));
  for (int64_t pos = 0; pos < shard.num_tokens(); pos += kChunk) {
    const int64_t n = std::min(kChunk, shard.num_tokens() - pos);
    shard.read(pos, n, ids.data());
    for (int64_t i = 0; i < n; ++i)
      if (ids[static_cast<size_t>(i)] == eot && pos + i + 1 < shard.num_tokens())
        starts.push_back(static_cast<uint64_t>(pos + i + 1));
  }
  return starts;
}

void write_index(const MappedShard& shard, const std::vector<uint64_t>& starts, int64_t eot) {
  DocumentIndexHeader h{};
  std::memcpy(h.magic, kDocumentIndexMagic, sizeof h.magic);
  h.version = 1;
  h.eot = static_cast<int32_t>(eot);
  h.tokens = static_cast<uint64_t>(shard.num_tokens());
  h.count = starts.size();
  h.shard_crc32c = shard_sample_crc32c(shard);
  const std::string_view body(reinterpret_cast<const char*>(starts.data()),
                              starts.size() * sizeof(uint64_t));
  h.crc32c = crc32c(body);
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof h);
  bytes.append(body);
  const std::string path = document_index_path(shard.path());
  try {
    write_file_durably(path, bytes);
  } catch (const Error& e) {  // exit 74, as every failed write (a full disk): not bad data
    throw Error(e.code(), fmt::format("cannot write the document index: {}", e.what()));
  }
}

}  // namespace

uint32_t shard_sample_crc32c(const MappedShard& shard) {
  constexpr int64_t kRuns = 64, kRun = 1024;
  const int64_t n = shard.num_tokens();
  std::vector<int32_t> ids(static_cast<size_t>(std::min(n, kRuns * kRun)));
  if (n <= kRuns * kRun) {
    shard.read(0, n, ids.data());
  } else {
    for (int64_t r = 0; r < kRuns; ++r)
      shard.read(r * (n - kRun) / (kRuns - 1), kRun, ids.data() + r * kRun);
  }
  return crc32c(std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
}

std::string document_index_path(const std::string& shard_path) {
  fs::path p(shard_path);
  if (p.extension() == ".bin") return p.replace_extension(".idx").string();
  return shard_path + ".idx";
}

void write_prepared_indexes(const std::string& dir, int vocab_size, int64_t eot,
                            const std::vector<uint64_t>& input_tokens) {
  const std::string train_path = (fs::path(dir) / "train.bin").string();
  const std::string val_path = (fs::path(dir) / "val.bin").string();
  const MappedShard train(train_path, vocab_size), val(val_path, vocab_size);
  const auto ntrain = static_cast<uint64_t>(train.num_tokens());
  const auto nval = static_cast<uint64_t>(val.num_tokens());
  if (eot >= 0) {
    write_index(train, scan_for_eot(train, eot), eot);
    write_index(val, scan_for_eot(val, eot), eot);
    return;
  }
  // The inputs follow one another in the stream train.bin + val.bin; each split starts a
  // document at its first token (the val split's may be the rest of one begun in train).
  std::vector<uint64_t> t = {0}, v = {0};
  uint64_t s = 0;
  for (const uint64_t n : input_tokens) {
    if (s > 0 && s < ntrain && s != t.back()) t.push_back(s);
    if (s > ntrain && s < ntrain + nval && s - ntrain != v.back()) v.push_back(s - ntrain);
    s += n;
  }
  write_index(train, t, eot);
  write_index(val, v, eot);
}

DocumentIndex::DocumentIndex(const std::string& path, const MappedShard& shard,
                             int64_t boundary_checks) {
  const auto fail = [&](const std::string& what) {
    return DataError(fmt::format(
        "{}: the document index does not match {}: {}; run `trainrun data prepare` again to "
        "write both (or delete {} to find documents from the end-of-text id)",
        path, shard.path(), what, path));
  };
  file_ = std::make_unique<MappedFile>(
      path, "document index", sizeof(DocumentIndexHeader),
      fail(fmt::format("shorter than its {}-byte header", sizeof(DocumentIndexHeader))).what());
  const size_t len = file_->size();
  DocumentIndexHeader h;
  std::memcpy(&h, file_->data(), sizeof h);
  if (std::memcmp(h.magic, kDocumentIndexMagic, sizeof h.magic) != 0) throw fail("bad magic");
  if (h.version != 1) throw fail(fmt::format("version {} (this build reads version 1)", h.version));
  if (h.count == 0 || h.count != (len - sizeof h) / sizeof(uint64_t) ||
      (len - sizeof h) % sizeof(uint64_t) != 0)
    throw fail(fmt::format("its header says {} documents but the file holds {} bytes of starts",
                           h.count, len - sizeof h));
  starts_ = reinterpret_cast<const uint64_t*>(file_->data() + sizeof h);
  count_ = static_cast<int64_t>(h.count);
  eot_ = h.eot;
  if (h.tokens != static_cast<uint64_t>(shard.num_tokens()))
    throw fail(
        fmt::format("it indexes {} tokens but the shard holds {}", h.tokens, shard.num_tokens()));
  if (shard_sample_crc32c(shard) != h.shard_crc32c)
    throw fail(
        "the shard's tokens changed since the index was written (their sampled CRC-32C "
        "differs)");
  const std::string_view body(reinterpret_cast<const char*>(starts_), h.count * sizeof(uint64_t));
  if (crc32c(body) != h.crc32c) throw fail("its CRC-32C does not match (a corrupted file)");
  for (int64_t i = 0; i < count_; ++i)
    if ((i == 0 && starts_[0] != 0) || (i > 0 && starts_[i] <= starts_[i - 1]) ||
        starts_[i] >= h.tokens)
      throw fail(
          fmt::format("document {} starts at {}, out of order or past the shard", i, starts_[i]));
  // The end-of-text id must end every document but the last: checked at up to boundary_checks
  // starts spread evenly, so that opening a corpus at N ranks does not read the whole of it.
  if (eot_ >= 0 && count_ > 1) {
    const int64_t n = count_ - 1;
    const int64_t checks = boundary_checks <= 0 ? n : std::min(n, boundary_checks);
    for (int64_t c = 0; c < checks; ++c) {
      const int64_t i = 1 + (checks == n ? c : c * n / checks);
      int32_t id = 0;
      shard.read(static_cast<int64_t>(starts_[i]) - 1, 1, &id);
      if (id != eot_)
        throw fail(
            fmt::format("document {} starts at {} but token {} before it is {}, not the "
                        "end-of-text id {}",
                        i, starts_[i], starts_[i] - 1, id, eot_));
    }
  }
}

DocumentIndex::~DocumentIndex() = default;

int64_t DocumentIndex::find(uint64_t pos) const {
  return static_cast<int64_t>(std::upper_bound(starts_, starts_ + count_, pos) - starts_) - 1;
}

}  // namespace trainrun
