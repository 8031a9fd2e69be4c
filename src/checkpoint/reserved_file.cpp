// A new file with its space allocated up front (see reserved_file.h for why).
#include "reserved_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

std::string mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
}

// "3.2 MiB free" for the file system holding `path`, or "" when statvfs cannot tell.
std::string free_space(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  struct statvfs st {};
  if (::statvfs(dir.empty() ? "." : dir.c_str(), &st) != 0) return "";
  return fmt::format(", {} free", mib(uint64_t(st.f_bavail) * st.f_frsize));
}

// Writes all of `image` at offset 0; returns 0 or the errno.
int write_all(int fd, const std::vector<char>& image) {
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = ::pwrite(fd, image.data() + done, image.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += size_t(n);
  }
  return 0;
}

}  // namespace

void create_reserved_file(const std::string& path, const std::vector<char>& image, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointWriteError(fmt::format("cannot create {}: {}", path, strerror(errno)));
  // posix_fallocate returns the error instead of setting errno; where the file system cannot
  // allocate, glibc writes zeros, which reserves the space just the same.
  int err = ::posix_fallocate(fd, 0, off_t(bytes));
  if (err == 0) err = write_all(fd, image);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0) return;
  const bool no_space = err == ENOSPC || err == EDQUOT;
  std::string room = no_space ? free_space(path) : "";
  ::unlink(path.c_str());
  throw CheckpointWriteError(fmt::format("{} ({} needed{}): {}",
                                         no_space ? "not enough space" : "cannot reserve space",
                                         mib(bytes), room, strerror(err)));
}

}  // namespace trainrun
