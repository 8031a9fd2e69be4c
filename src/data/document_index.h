// A shard's document index (docs/data-format.md, "Document index"): `X.idx` beside shard `X.bin`,
// where each document of the shard starts. `data prepare` writes one per split; document masking
// reads it (where there is none, documents are found from the end-of-text id in each sample).
//
// What a document is: with an end-of-text id, a document starts at the shard's first token and
// after every end-of-text id (documents.h's rule, so the index and a scan of the ids agree);
// without one (`--eot none`), at the first token of every input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trainrun {

class MappedFile;
class MappedShard;

// 64 bytes, little-endian, then `count` u64 starts, ascending, the first 0, each < tokens.
struct DocumentIndexHeader {
  char magic[8];          // "TRNDOCIX"
  uint32_t version;       // 1
  int32_t eot;            // the end-of-text id the documents end with; -1: none (inputs)
  uint64_t tokens;        // of the shard it indexes
  uint64_t count;         // documents
  uint32_t crc32c;        // CRC-32C of the starts
  uint32_t shard_crc32c;  // CRC-32C of a sample of the shard's tokens (shard_sample_crc32c)
  uint8_t reserved[24];
};
static_assert(sizeof(DocumentIndexHeader) == 64);

inline constexpr char kDocumentIndexMagic[8] = {'T', 'R', 'N', 'D', 'O', 'C', 'I', 'X'};

// CRC-32C of the shard's tokens (as int32) in 64 runs of 1024 spread evenly from its first token
// to its last, or of all of them in a shorter shard: what an index records of its shard, so that
// a shard changed after its index was written is told apart at the cost of a few page reads.
uint32_t shard_sample_crc32c(const MappedShard& shard);

// X.bin -> X.idx (any other name: name + ".idx").
std::string document_index_path(const std::string& shard_path);

// After `data prepare` wrote DIR/train.bin and DIR/val.bin (one stream cut in two): their
// indexes, DIR/train.idx and DIR/val.idx. With eot >= 0 each shard is scanned for it; without,
// the documents are the inputs, `input_tokens` being each one's token count in order. Each is
// written to a temporary and renamed; DataError if it cannot be.
void write_prepared_indexes(const std::string& dir, int vocab_size, int64_t eot,
                            const std::vector<uint64_t>& input_tokens);

// The index beside a shard, memory-mapped and checked against it: magic, version, size, CRC,
// the shard's token count, ascending starts, and (eot >= 0) the end-of-text id before up to
// `boundary_checks` starts spread over the shard (all of them when <= 0). Throws DataError
// naming both files and the fix (`trainrun data prepare` again) when they disagree.
class DocumentIndex {
 public:
  DocumentIndex(const std::string& path, const MappedShard& shard, int64_t boundary_checks = 4096);
  ~DocumentIndex();
  DocumentIndex(const DocumentIndex&) = delete;
  DocumentIndex& operator=(const DocumentIndex&) = delete;

  int64_t eot() const { return eot_; }
  int64_t size() const { return count_; }
  uint64_t start(int64_t i) const { return starts_[i]; }
  // The index of the document holding token pos: the last start <= pos.
  int64_t find(uint64_t pos) const;

 private:
  std::unique_ptr<MappedFile> file_;  // a SIGBUS in it is exit 3, naming it (mapped_file.h)
  const uint64_t* starts_ = nullptr;
  int64_t count_ = 0, eot_ = -1;
};

}  // namespace trainrun
