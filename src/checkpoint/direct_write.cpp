// write_direct_prefix (direct_write.h).
#include "direct_write.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace trainrun {

size_t write_direct_prefix(const std::string& path, off_t offset, const char* data, size_t bytes,
                           size_t slab, const std::function<void(const char*, size_t)>& each) {
  const size_t prefix = bytes / kDirectAlign * kDirectAlign;
  slab = std::max(kDirectAlign, slab / kDirectAlign * kDirectAlign);
  if (prefix == 0 || offset % static_cast<off_t>(kDirectAlign) != 0 ||
      reinterpret_cast<uintptr_t>(data) % kDirectAlign != 0)
    return 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return 0;  // EINVAL: this file system has no direct I/O (tmpfs, some FUSE)
  size_t done = 0;
  std::string error;
  while (done < prefix && error.empty()) {
    const size_t n = std::min(slab, prefix - done);
    for (size_t put = 0; put < n;) {
      const ssize_t w = ::pwrite(fd, data + done + put, n - put, offset + off_t(done + put));
      if (w < 0 && errno == EINTR) continue;
      // EINVAL on the first write: the file system accepted O_DIRECT at open but not this
      // request's alignment; nothing was written, so the usual path can still do it all.
      if (w < 0 && errno == EINVAL && done == 0 && put == 0) {
        ::close(fd);
        return 0;
      }
      if (w <= 0) {
        error =
            fmt::format("direct write of {} at byte {} failed: {}", path,
                        offset + off_t(done + put), w < 0 ? std::strerror(errno) : "no progress");
        break;
      }
      put += static_cast<size_t>(w);
    }
    if (error.empty()) each(data + done, n);  // after the write: a refused first write calls none
    done += n;
  }
  ::close(fd);
  if (!error.empty()) throw DirectWriteError(error);
  return prefix;
}

}  // namespace trainrun
