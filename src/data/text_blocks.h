// Reads a text file of any size in blocks of segments, each cut where the GPT-2 split has a
// boundary (pretokenize.h: next_safe_cut), so every segment encodes exactly as it would inside
// the whole file and segments can be encoded in parallel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun {

struct TextSegment {
  std::string_view text;
  uint64_t offset;  // of text[0] in the file
};

// Not thread-safe; the segments next() returns point into its buffer and stay valid until the
// next call. Memory: about block_bytes, plus the longest stretch with no safe cut (a segment is
// cut at a code point instead once that stretch reaches block_bytes: the one place where the
// split can differ from the whole file's, and only in text without whitespace for that long).
class TextBlocks {
 public:
  // Throws DataError unless path is a readable regular file. It is read up to the size it had
  // when opened. A segment starts at the first safe cut at or after cut_at (the train/val split).
  TextBlocks(const std::string& path, size_t block_bytes, size_t segment_bytes,
             uint64_t cut_at = UINT64_MAX);
  ~TextBlocks();
  TextBlocks(const TextBlocks&) = delete;
  TextBlocks& operator=(const TextBlocks&) = delete;

  uint64_t size() const { return size_; }
  // The next block's segments, in order; false when the file is done.
  bool next(std::vector<TextSegment>& segments);

  // Where a resumed reader continues: the end of the segments handed out so far, and how far
  // the file has been read (a resumed `data prepare`, prepare_journal.h).
  uint64_t consumed_end() const { return buf_offset_ + consumed_; }
  uint64_t read_end() const { return read_; }
  // Before the first next(): continue as the reader that reported these did, cutting the same
  // segments (its next block reads up to read_end + block_bytes). DataError if it cannot seek.
  void resume(uint64_t consumed_end, uint64_t read_end);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, read_ = 0;
  uint64_t buf_offset_ = 0;  // file offset of buf_[0]
  size_t block_, segment_;
  uint64_t cut_at_;
  std::string buf_;
  size_t consumed_ = 0;           // bytes of buf_ handed out by the last next()
  uint64_t resume_read_end_ = 0;  // resume(): how far the reader it continues had read
};

}  // namespace trainrun
