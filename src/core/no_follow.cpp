// open_no_follow, fopen_no_follow, refuse_link, replace_file (trainrun/core/no_follow.h).
#include "trainrun/core/no_follow.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

[[noreturn]] void throw_link(const std::string& path) {
  throw RunDirError(fmt::format(
      "{} is a symbolic link: trainrun writes the files of a run directory itself and never "
      "through a link (that would overwrite the link's target); remove the link (rm {}) and run "
      "again",
      path, path));
}

}  // namespace

bool is_symlink(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

int open_no_follow(const std::string& path, int flags, mode_t mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  // ELOOP is what O_NOFOLLOW gives for a link (and for a loop of links in the folders above,
  // which lstat then tells apart).
  if (fd < 0 && errno == ELOOP && is_symlink(path)) throw_link(path);
  return fd;
}

std::FILE* fopen_no_follow(const std::string& path, const char* mode) {
  const std::string m = mode;
  int flags = 0;
  if (m == "w" || m == "wb")
    flags = O_WRONLY | O_CREAT | O_TRUNC;
  else if (m == "a" || m == "ab")
    flags = O_WRONLY | O_CREAT | O_APPEND;
  else
    throw Error(kExitFailure, fmt::format("fopen_no_follow: mode {} is not supported", m));
  const int fd = open_no_follow(path, flags);
  if (fd < 0) return nullptr;
  std::FILE* f = ::fdopen(fd, mode);
  if (!f) {
    const int err = errno;
    ::close(fd);
    errno = err;
  }
  return f;
}

void refuse_link(const std::string& path) {
  if (is_symlink(path)) throw_link(path);
}

void refuse_special_file(const std::string& path) {
  refuse_link(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw RunDirError(fmt::format(
        "{} is not a regular file: trainrun wrote it as one; move it away and run again", path));
}

void replace_file(const std::string& path, const std::string& text) {
  const std::filesystem::path p(path);
  const std::string tmp =
      (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
  write_new_file(tmp, text, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(kExitWrite, fmt::format("cannot write {}: {}", path, std::strerror(err)));
  }
}

}  // namespace trainrun
