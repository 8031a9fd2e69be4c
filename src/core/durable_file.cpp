#include "trainrun/core/durable_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainrun/core/errors.h"

namespace trainrun {

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0)
    throw Error(kExitWrite, fmt::format("cannot open {} to sync it: {}", path, strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw Error(kExitWrite, fmt::format("fsync {} failed: {}", path, strerror(err)));
}

void rename_durably(const std::string& tmp, const std::string& path) {
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(kExitWrite, fmt::format("rename to {} failed: {}", path, strerror(errno)));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

void write_new_file(const std::string& tmp, const std::string& text, bool sync) {
  ::unlink(tmp.c_str());  // a stale temporary of an earlier process with this pid
  // O_EXCL | O_NOFOLLOW: a link planted under the temporary's name is never written through.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(kExitWrite, fmt::format("cannot create {}: {}", tmp, strerror(errno)));
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (err == 0 && sync && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw Error(kExitWrite, fmt::format("cannot write {}: {}", tmp, strerror(err)));
  }
}

void write_file_durably(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  write_new_file(tmp, text, true);
  try {
    rename_durably(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace trainrun
