// Block reads cut at safe split boundaries (text_blocks.h).
#include "text_blocks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "pretokenize.h"
#include "trainrun/core/errors.h"

namespace trainrun {

TextBlocks::TextBlocks(const std::string& path, size_t block_bytes, size_t segment_bytes,
                       uint64_t cut_at)
    : path_(path),
      block_(std::max<size_t>(block_bytes, 1)),
      segment_(std::clamp<size_t>(segment_bytes, 1, std::max<size_t>(block_bytes / 2, 1))),
      cut_at_(cut_at) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0)
    throw DataError(fmt::format("{}: cannot read the text file ({}); fix the path", path,
                                std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw DataError(fmt::format(
        "{}: not a regular file (a directory, device or FIFO); point it at a text file", path));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

TextBlocks::~TextBlocks() {
  if (fd_ >= 0) ::close(fd_);
}

bool TextBlocks::next(std::vector<TextSegment>& segments) {
  segments.clear();
  // What the last call handed out goes; the carried tail moves to the front.
  buf_.erase(0, consumed_);
  buf_offset_ += consumed_;
  consumed_ = 0;
  // A block more than was read (a resumed reader: more than the reader it continues had read).
  const uint64_t until = std::max(read_, resume_read_end_) + block_;
  resume_read_end_ = 0;
  while (read_ < until && read_ < size_) {
    const size_t have = buf_.size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(until - read_, size_ - read_));
    buf_.resize(have + n);
    const ssize_t r = ::read(fd_, buf_.data() + have, n);
    if (r < 0 && errno == EINTR) {
      buf_.resize(have);
      continue;
    }
    if (r < 0) throw DataError(fmt::format("{}: read error ({})", path_, std::strerror(errno)));
    buf_.resize(have + static_cast<size_t>(r));
    if (r == 0) size_ = read_;  // shrank while reading: what is there is the file
    read_ += static_cast<uint64_t>(r);
  }
  if (buf_.empty()) return false;
  const bool eof = read_ >= size_;
  const std::string_view text(buf_);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t target = pos + segment_;
    if (cut_at_ > buf_offset_ + pos && cut_at_ <= buf_offset_ + target)
      target = static_cast<size_t>(cut_at_ - buf_offset_);
    const size_t q = target >= text.size() ? std::string::npos : next_safe_cut(text, target);
    if (q == std::string::npos) break;
    segments.push_back({text.substr(pos, q - pos), buf_offset_ + pos});
    pos = q;
  }
  size_t end = pos;
  if (eof) {
    end = text.size();
  } else if (pos == 0 && text.size() >= block_) {
    // No safe cut in a whole block: cut before the last code point that may be incomplete.
    end = text.size();
    for (int k = 0; k < 3 && end > 1 && (static_cast<unsigned char>(text[end - 1]) & 0xC0) == 0x80;
         ++k)
      --end;
    if (end > 1 && static_cast<unsigned char>(text[end - 1]) >= 0xC0) --end;
  }
  if (end > pos) segments.push_back({text.substr(pos, end - pos), buf_offset_ + pos});
  consumed_ = end;
  return true;
}

void TextBlocks::resume(uint64_t consumed_end, uint64_t read_end) {
  const uint64_t at = std::min(consumed_end, size_);
  if (::lseek(fd_, static_cast<off_t>(at), SEEK_SET) != static_cast<off_t>(at))
    throw DataError(
        fmt::format("{}: cannot seek to byte {} ({})", path_, at, std::strerror(errno)));
  buf_.clear();
  buf_offset_ = read_ = at;
  consumed_ = 0;
  resume_read_end_ = std::max(read_end, at);
}

}  // namespace trainrun
