// One token shard on disk, memory-mapped and validated (trainrun or llm.c format).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "mapped_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {

// trainrun's own shard header (docs/data-format.md): 64 bytes, little-endian.
struct ShardHeader {
  char magic[8];     // "TRNTOKEN"
  uint32_t version;  // 1
  uint32_t dtype;    // bytes per token: 1, 2 or 4
  uint64_t count;    // tokens after the header
  uint32_t vocab_size;
  uint8_t reserved[36];  // zero
};
static_assert(sizeof(ShardHeader) == 64);

inline constexpr char kShardMagic[8] = {'T', 'R', 'N', 'T', 'O', 'K', 'E', 'N'};
inline constexpr uint32_t kShardVersion = 1;
// llm.c's dev/data/data_common.py: 256 int32 header, then uint16 (GPT-2) or uint32 (Llama 3).
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;

// Maps a shard read-only and checks magic, version and size; throws DataError naming the file.
// Token ids must be < vocab_size: checked by one pass at open unless the header (or the token
// width) already guarantees it, and in every read.
class MappedShard {
 public:
  MappedShard(const std::string& path, int vocab_size);
  ~MappedShard();
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return count_; }
  int width() const { return width_; }
  // Tokens [pos, pos + n) of this shard, widened to int32; DataError for an id >= vocab_size.
  void read(int64_t pos, int64_t n, int32_t* out) const;

 private:
  DataError too_large(int64_t at, int64_t largest) const;  // largest -1: unknown

  std::string path_;
  MappedFile file_;  // a SIGBUS in it (the file truncated while mapped) is exit 3, named
  size_t map_len_ = 0;
  const unsigned char* tokens_ = nullptr;
  int width_ = 0;
  int vocab_size_ = 0;
  int64_t count_ = 0;
};

// Streams a shard in trainrun's format to PATH.tmp.PID; commit() fills in the count and renames
// it to PATH, so a reader never sees half a shard. Destroyed uncommitted, it removes the
// temporary file. Not thread-safe.
//
// A resumable writer (a `data prepare`, prepare_journal.h) writes PATH.partial instead, a
// stable name that stays when it is destroyed uncommitted: sync() makes what it holds durable,
// and a later writer reopens it, keeping the tokens the journal recorded.
class ShardWriter {
 public:
  // The token width is the smallest that holds vocab_size; throws DataError if it cannot open.
  ShardWriter(std::string path, int vocab_size);
  // PATH.partial: keep_tokens <= 0 starts it afresh; otherwise it must be a partial shard for
  // this vocabulary holding at least keep_tokens tokens, and is cut back to them (DataError
  // naming the file and the fix if not).
  struct Partial {
    int64_t keep_tokens = 0;
  };
  ShardWriter(std::string path, int vocab_size, Partial partial);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Throws DataError for a token outside [0, vocab_size).
  void append(const int32_t* tokens, size_t n);
  uint64_t count() const { return count_; }
  int width() const { return width_; }
  // Flushes and fsyncs what is written (not the header: its count is written by commit()).
  void sync();
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  int vocab_size_, width_;
  uint64_t count_ = 0;
  bool partial_ = false;
};

// The smallest token width (bytes) that holds ids below vocab_size: 1, 2 or 4.
int shard_width_for_vocab(int64_t vocab_size);

}  // namespace trainrun
