// read_regular_file, read_regular_lines (trainrun/core/regular_file.h).
#include "trainrun/core/regular_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainrun/core/errors.h"
#include "trainrun/core/no_follow.h"

namespace trainrun {
namespace {

std::string size_text(uint64_t bytes) {
  constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;
  if (bytes >= kGiB)
    return bytes % kGiB ? fmt::format("{:.1f} GiB", double(bytes) / kGiB)
                        : fmt::format("{} GiB", bytes / kGiB);
  return bytes % kMiB ? fmt::format("{:.1f} MiB", double(bytes) / kMiB)
                      : fmt::format("{} MiB", bytes / kMiB);
}

// `bytes`: its size, or what was read of it when it grew while read.
[[noreturn]] void too_big(const std::string& path, uint64_t bytes, const FileRule& rule) {
  throw Error(rule.exit_code,
              fmt::format("{} is larger than the {} trainrun reads of it ({} or more): a sparse "
                          "file, or not the file trainrun wrote; {}",
                          path, size_text(rule.max_bytes), size_text(bytes), rule.fix));
}

[[noreturn]] void unreadable(const std::string& path, int err, const FileRule& rule) {
  throw Error(rule.exit_code,
              fmt::format("cannot read {}: {}; {}", path, std::strerror(err), rule.fix));
}

void check(const std::string& path, const struct stat& st, const FileRule& rule) {
  if (!S_ISREG(st.st_mode))
    throw Error(rule.exit_code,
                fmt::format("{} is {}{}, not a regular file (trainrun reads only those: a FIFO "
                            "can block a read forever, a device never ends); {}",
                            path, file_kind(st.st_mode),
                            is_symlink(path) ? " (through a symbolic link)" : "", rule.fix));
  if (static_cast<uint64_t>(st.st_size) > rule.max_bytes)
    too_big(path, static_cast<uint64_t>(st.st_size), rule);
}

// A descriptor, closed when it goes.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// `path` opened and checked; fd -1 when nothing is there.
void open_checked(const std::string& path, const FileRule& rule, Fd& f) {
  // stat first, so that a device is refused without being opened (opening some has effects: a
  // tape rewinds); then the descriptor itself, in case the name was replaced in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    unreadable(path, errno, rule);
  }
  check(path, st, rule);
  // O_NONBLOCK: a FIFO put there since the stat must not block the open.
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) {
    if (errno == ENOENT) return;
    unreadable(path, errno, rule);
  }
  if (::fstat(f.fd, &st) != 0) unreadable(path, errno, rule);
  check(path, st, rule);
}

// Feeds the file's bytes to `chunk`, rule.max_bytes at most (a file growing past it while read
// is refused as too big).
template <typename Chunk>
void read_all(const Fd& f, const std::string& path, const FileRule& rule, Chunk&& chunk) {
  char buf[65536];
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) unreadable(path, errno, rule);
    if (n == 0) return;
    total += static_cast<uint64_t>(n);
    if (total > rule.max_bytes) too_big(path, total, rule);
    chunk(std::string_view(buf, static_cast<size_t>(n)));
  }
}

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::optional<std::string> read_regular_file(const std::string& path, const FileRule& rule) {
  Fd f;
  open_checked(path, rule, f);
  if (f.fd < 0) return std::nullopt;
  std::string text;
  read_all(f, path, rule, [&text](std::string_view c) { text.append(c); });
  return text;
}

bool read_regular_lines(const std::string& path, const FileRule& rule, size_t max_line,
                        const std::function<void(std::string_view)>& line) {
  Fd f;
  open_checked(path, rule, f);
  if (f.fd < 0) return false;
  std::string partial;
  bool skipping = false;  // inside a line longer than max_line
  read_all(f, path, rule, [&](std::string_view c) {
    while (!c.empty()) {
      const size_t nl = c.find('\n');
      const std::string_view piece = c.substr(0, nl);
      if (!skipping && partial.size() + piece.size() > max_line) {
        skipping = true;
        partial.clear();
      }
      if (!skipping) partial.append(piece);
      if (nl == std::string_view::npos) return;
      if (!skipping) line(partial);
      partial.clear();
      skipping = false;
      c.remove_prefix(nl + 1);
    }
  });
  if (!skipping && !partial.empty()) line(partial);  // a last line without its '\n'
  return true;
}

}  // namespace trainrun
