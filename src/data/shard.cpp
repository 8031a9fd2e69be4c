// Reading and writing token shards: trainrun's own format and llm.c's, told apart by magic.
#include "shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "trainrun/core/errors.h"
#include "trainrun/data/data.h"
#include "trainrun/data/output_files.h"

namespace trainrun {

// Shards are little-endian and read in place; a big-endian host would need a byte-swapping path.
static_assert(std::endian::native == std::endian::little);

namespace {

template <typename T>
int64_t max_token(const T* p, int64_t n) {
  int64_t m = 0;
#pragma omp parallel for reduction(max : m) schedule(static)
  for (int64_t i = 0; i < n; ++i) m = p[i] > m ? static_cast<int64_t>(p[i]) : m;
  return m;
}

template <typename T>
int64_t first_at_least(const T* p, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<int64_t>(p[i]) >= limit) return i;
  return -1;
}

int64_t first_in(const int32_t* p, int64_t n, int64_t limit) {
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<uint32_t>(p[i]) >= static_cast<uint64_t>(limit)) return i;
  return -1;
}

int64_t token_at(const unsigned char* p, int width, int64_t i) {
  if (width == 1) return p[i];
  if (width == 2) return reinterpret_cast<const uint16_t*>(p)[i];
  return reinterpret_cast<const uint32_t*>(p)[i];
}

std::string hex_bytes(const unsigned char* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return s;
}

}  // namespace

int shard_width_for_vocab(int64_t vocab_size) {
  return vocab_size <= 256 ? 1 : vocab_size <= 65536 ? 2 : 4;
}

MappedShard::MappedShard(const std::string& path, int vocab_size)
    : path_(path),
      file_(path, "token shard", 8,
            fmt::format("{}: not a trainrun or llm.c token shard (too short for a header); make "
                        "shards with `trainrun data prepare` or llm.c's dev/data scripts",
                        path)),
      map_len_(file_.size()) {
  const unsigned char* base = file_.data();
  size_t header_bytes = 0;
  uint64_t count = 0;
  uint64_t header_vocab = 0;  // trainrun shards: the vocabulary the writer checked ids against
  int32_t magic32 = 0;
  std::memcpy(&magic32, base, 4);
  if (std::memcmp(base, kShardMagic, 8) == 0) {
    header_bytes = sizeof(ShardHeader);
    if (map_len_ < header_bytes)
      throw DataError(fmt::format(
          "{}: truncated: {} bytes, shorter than the {}-byte trainrun shard header; re-create it",
          path, map_len_, header_bytes));
    ShardHeader h;
    std::memcpy(&h, base, sizeof h);
    if (h.version != kShardVersion)
      throw DataError(fmt::format(
          "{}: trainrun shard version {} is not supported (this build reads version {}); "
          "re-create it with this trainrun's `trainrun data prepare`",
          path, h.version, kShardVersion));
    if (h.dtype != 1 && h.dtype != 2 && h.dtype != 4)
      throw DataError(fmt::format(
          "{}: bad token width code {} in the header (expected 1, 2 or 4 bytes); re-create it",
          path, h.dtype));
    width_ = static_cast<int>(h.dtype);
    count = h.count;
    header_vocab = h.vocab_size;
  } else if (magic32 == kLlmcMagicGpt2 || magic32 == kLlmcMagicLlama3) {
    header_bytes = 256 * sizeof(int32_t);
    if (map_len_ < header_bytes)
      throw DataError(fmt::format(
          "{}: truncated: {} bytes, shorter than the 1024-byte llm.c shard header; re-create it",
          path, map_len_));
    int32_t h[3];
    std::memcpy(h, base, sizeof h);
    const int32_t want_version = magic32 == kLlmcMagicGpt2 ? 1 : 7;
    if (h[1] != want_version)
      throw DataError(fmt::format(
          "{}: llm.c shard version {} is not supported (magic {} goes with version {}); "
          "re-create it with llm.c's dev/data scripts",
          path, h[1], magic32, want_version));
    if (h[2] < 0)
      throw DataError(fmt::format("{}: negative token count {} in the llm.c header", path, h[2]));
    width_ = magic32 == kLlmcMagicGpt2 ? 2 : 4;
    count = static_cast<uint64_t>(h[2]);
  } else {
    throw DataError(fmt::format(
        "{}: not a trainrun or llm.c token shard (magic {}); make shards with `trainrun data "
        "prepare` or llm.c's dev/data scripts",
        path, hex_bytes(base, 8)));
  }

  const size_t payload = map_len_ - header_bytes;
  if (count > payload / static_cast<size_t>(width_))
    throw DataError(fmt::format(
        "{}: truncated: the header says {} tokens ({} bytes) but only {} bytes follow it; "
        "re-create or re-copy the shard",
        path, count, count * static_cast<uint64_t>(width_), payload));
  if (count * static_cast<uint64_t>(width_) != payload)
    throw DataError(fmt::format(
        "{}: {} unexpected bytes after the {} tokens the header announces; re-create the shard",
        path, payload - count * static_cast<uint64_t>(width_), count));
  count_ = static_cast<int64_t>(count);
  tokens_ = base + header_bytes;

  vocab_size_ = vocab_size;
  // A trainrun shard written for a vocabulary that fits holds only ids below it (ShardWriter
  // refuses others), and so does any shard whose token width cannot hold an id that large:
  // neither is scanned, so opening a corpus does not read it (at N ranks, N times). Others
  // (llm.c shards, a shard written for a larger vocabulary) get one parallel pass here. Every
  // window is checked again as it is read (read()), which catches a corrupted file.
  const bool written_to_fit = header_vocab > 0 && header_vocab <= static_cast<uint64_t>(vocab_size);
  const bool width_fits = width_ < 4 && (int64_t{1} << (8 * width_)) <= vocab_size;
  if (!written_to_fit && !width_fits) {
    file_.advise(MADV_SEQUENTIAL);
    int64_t m = 0;
    if (width_ == 1) m = max_token(tokens_, count_);
    if (width_ == 2) m = max_token(reinterpret_cast<const uint16_t*>(tokens_), count_);
    if (width_ == 4) m = max_token(reinterpret_cast<const uint32_t*>(tokens_), count_);
    if (count_ > 0 && m >= vocab_size) {
      int64_t at = -1;
      if (width_ == 1) at = first_at_least(tokens_, count_, vocab_size);
      if (width_ == 2)
        at = first_at_least(reinterpret_cast<const uint16_t*>(tokens_), count_, vocab_size);
      if (width_ == 4)
        at = first_at_least(reinterpret_cast<const uint32_t*>(tokens_), count_, vocab_size);
      throw too_large(at, m);
    }
  }
  file_.advise(MADV_RANDOM);
}

DataError MappedShard::too_large(int64_t at, int64_t largest) const {
  return DataError(fmt::format(
      "{}: token {} at position {} >= model.vocab_size {}{}; the data was tokenized for a larger "
      "vocabulary: set model.vocab_size >= {}",
      path_, token_at(tokens_, width_, at), at, vocab_size_,
      largest >= 0 ? fmt::format(" (largest token {})", largest) : "",
      largest >= 0 ? largest + 1 : token_at(tokens_, width_, at) + 1));
}

MappedShard::~MappedShard() = default;

void MappedShard::read(int64_t pos, int64_t n, int32_t* out) const {
  if (pos < 0 || n < 0 || pos + n > count_)
    throw std::out_of_range(
        fmt::format("{}: read [{}, {}) past {} tokens", path_, pos, pos + n, count_));
  uint32_t largest = 0;
  if (width_ == 1) {
    const unsigned char* p = tokens_ + pos;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i], largest = std::max<uint32_t>(largest, p[i]);
  } else if (width_ == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(tokens_) + pos;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i], largest = std::max<uint32_t>(largest, p[i]);
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(tokens_) + pos;
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<int32_t>(p[i]), largest = std::max(largest, p[i]);
  }
  if (largest >= static_cast<uint32_t>(vocab_size_)) {
    const int64_t at = pos + first_in(out, n, vocab_size_);
    throw too_large(at, -1);
  }
}

namespace {

template <typename T>
bool write_tokens(std::FILE* f, const int32_t* tokens, size_t count) {
  T buf[1 << 14];
  constexpr size_t kChunk = sizeof buf / sizeof buf[0];
  for (size_t i = 0; i < count; i += kChunk) {
    const size_t n = std::min(kChunk, count - i);
    for (size_t j = 0; j < n; ++j) buf[j] = static_cast<T>(tokens[i + j]);
    if (std::fwrite(buf, sizeof(T), n, f) != n) return false;
  }
  return true;
}

// The file a writer streams into, opened without following a link at its name (a link planted
// there would have the shard written into its target): a new file, after removing a stale one
// of that name (O_EXCL), or the partial shard a resumed prepare continues. nullptr and errno on
// failure, as fopen.
std::FILE* open_output(const std::string& path, bool existing) {
  if (!existing) ::unlink(path.c_str());
  const int flags = existing ? O_RDWR : O_WRONLY | O_CREAT | O_EXCL;
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  std::FILE* f = ::fdopen(fd, existing ? "r+b" : "wb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    errno = err;
  }
  return f;
}

ShardHeader header_for(int width, uint64_t count, int vocab_size) {
  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.dtype = static_cast<uint32_t>(width);
  h.count = count;
  h.vocab_size = static_cast<uint32_t>(vocab_size);
  return h;
}

}  // namespace

ShardWriter::ShardWriter(std::string path, int vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size), width_(shard_width_for_vocab(vocab_size)) {
  if (vocab_size < 1)
    throw DataError(fmt::format("{}: cannot write a shard for vocab_size {}", path_, vocab_size));
  tmp_ = fmt::format("{}.tmp.{}", path_, ::getpid());
  f_ = open_output(tmp_, false);
  if (!f_) throw write_error(tmp_, errno);
  const ShardHeader h = header_for(width_, 0, vocab_size_);
  std::fwrite(&h, sizeof h, 1, f_);  // the count is filled in by commit()
}

ShardWriter::ShardWriter(std::string path, int vocab_size, Partial partial)
    : path_(std::move(path)),
      tmp_(path_ + ".partial"),
      vocab_size_(vocab_size),
      width_(shard_width_for_vocab(vocab_size)),
      partial_(true) {
  if (vocab_size < 1)
    throw DataError(fmt::format("{}: cannot write a shard for vocab_size {}", path_, vocab_size));
  if (partial.keep_tokens <= 0) {
    f_ = open_output(tmp_, false);
    if (!f_) throw write_error(tmp_, errno);
    const ShardHeader h = header_for(width_, 0, vocab_size_);
    std::fwrite(&h, sizeof h, 1, f_);  // the count is filled in by commit()
    return;
  }
  const auto keep = static_cast<uint64_t>(partial.keep_tokens);
  const auto cannot = [&](const std::string& why) {
    if (f_) std::fclose(f_);
    f_ = nullptr;
    return DataError(fmt::format(
        "{}: cannot continue the interrupted prepare: {}; pass --force to start over", tmp_, why));
  };
  f_ = open_output(tmp_, true);
  if (!f_) throw cannot(fmt::format("cannot open it ({})", std::strerror(errno)));
  ShardHeader h{};
  struct stat st {};
  if (std::fread(&h, sizeof h, 1, f_) != 1 || std::memcmp(h.magic, kShardMagic, 8) != 0 ||
      h.version != kShardVersion)
    throw cannot("it is not a trainrun shard");
  if (h.dtype != static_cast<uint32_t>(width_) ||
      h.vocab_size != static_cast<uint32_t>(vocab_size_))
    throw cannot(fmt::format("it holds {}-byte tokens of a vocabulary of {}, not {}-byte of {}",
                             h.dtype, h.vocab_size, width_, vocab_size_));
  const uint64_t want = sizeof h + keep * static_cast<uint64_t>(width_);
  if (::fstat(::fileno(f_), &st) != 0 || static_cast<uint64_t>(st.st_size) < want)
    throw cannot(fmt::format("it holds {} bytes, fewer than the {} tokens the journal records",
                             st.st_size, keep));
  // What was written after the journal's last entry goes: it is written again.
  if (std::fflush(f_) != 0 || ::ftruncate(::fileno(f_), static_cast<off_t>(want)) != 0 ||
      std::fseek(f_, 0, SEEK_END) != 0)
    throw cannot(fmt::format("cannot cut it back ({})", std::strerror(errno)));
  count_ = keep;
}

ShardWriter::~ShardWriter() {
  if (f_) {
    std::fclose(f_);
    if (!partial_) std::remove(tmp_.c_str());
  }
}

void ShardWriter::sync() {
  if (std::ferror(f_) || std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    throw write_error(tmp_, errno);
}

void ShardWriter::append(const int32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_size_)
      throw DataError(fmt::format("{}: token {} at position {} is outside [0, vocab_size {})",
                                  path_, tokens[i], count_ + i, vocab_size_));
  bool ok = true;
  if (width_ == 1) ok = write_tokens<uint8_t>(f_, tokens, n);
  if (width_ == 2) ok = write_tokens<uint16_t>(f_, tokens, n);
  if (width_ == 4) ok = write_tokens<uint32_t>(f_, tokens, n);
  if (!ok) throw write_error(tmp_, errno);
  count_ += n;
}

void ShardWriter::commit() {
  const ShardHeader h = header_for(width_, count_, vocab_size_);
  bool ok = !std::ferror(f_) && std::fseek(f_, 0, SEEK_SET) == 0 &&
            std::fwrite(&h, sizeof h, 1, f_) == 1 && std::fflush(f_) == 0 &&
            ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  ok = (std::fclose(f_) == 0) && ok;
  f_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = ok ? errno : err;
    if (!partial_) std::remove(tmp_.c_str());
    throw write_error(ok ? path_ : tmp_, e);
  }
}

void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens,
                       int vocab_size) {
  ShardWriter w(path, vocab_size);
  w.append(tokens.data(), tokens.size());
  w.commit();
}

}  // namespace trainrun
