// read_slabs (slab_reader.h): one reader thread ahead of the caller, bounded by a ring of slabs
// when nothing holds the data.
#include "slab_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace trainrun {
namespace {

// Slabs a verify-only read keeps in flight: enough that the reader never waits for the checker
// in steady state, small enough to stay in the last-level cache's neighbourhood.
constexpr size_t kRing = 8;
// The kernel is told this far ahead what comes next, so the disk queue never runs dry between
// the reader's calls.
constexpr size_t kAheadBytes = size_t{64} << 20;

// pread until `n` bytes arrived; "" or the reason it could not.
std::string pread_fully(int fd, char* into, size_t n, off_t at) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, into, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fmt::format("read failed at byte {}: {}", at, std::strerror(errno));
    if (r == 0) return fmt::format("the file ends at byte {}, before its data does", at);
    into += r;
    n -= static_cast<size_t>(r);
    at += r;
  }
  return {};
}

}  // namespace

void read_slabs(int fd, off_t offset, size_t bytes, size_t slab, char* out,
                const std::function<void(const char*, size_t)>& each) {
  if (bytes == 0) return;
  const size_t slabs = (bytes + slab - 1) / slab;
  std::vector<char> ring(out ? 0 : std::min(slabs, kRing) * slab);
  auto where = [&](size_t i) { return out ? out + i * slab : ring.data() + (i % kRing) * slab; };
  auto size_of = [&](size_t i) { return std::min(slab, bytes - i * slab); };

  std::mutex mu;
  std::condition_variable cv;
  size_t arrived = 0, consumed = 0;  // slabs, under mu
  bool cancel = false;
  std::string error;

  std::thread reader([&] {
    for (size_t i = 0; i < slabs; ++i) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return cancel || out || i < consumed + kRing; });
        if (cancel) return;
      }
      const off_t at = offset + static_cast<off_t>(i * slab);
      if ((i * slab) % kAheadBytes == 0)
        ::posix_fadvise(fd, at, static_cast<off_t>(std::min(kAheadBytes, bytes - i * slab)),
                        POSIX_FADV_WILLNEED);
      std::string why = pread_fully(fd, where(i), size_of(i), at);
      const bool failed = !why.empty();
      {
        std::lock_guard lock(mu);
        if (failed)
          error = std::move(why);
        else
          arrived = i + 1;
      }
      cv.notify_all();
      if (failed) return;
    }
  });
  // Stops and joins the reader however this function ends.
  struct Join {
    std::thread& t;
    std::mutex& mu;
    std::condition_variable& cv;
    bool& cancel;
    ~Join() {
      {
        std::lock_guard lock(mu);
        cancel = true;
      }
      cv.notify_all();
      t.join();
    }
  } join{reader, mu, cv, cancel};

  for (size_t i = 0; i < slabs; ++i) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return arrived > i || !error.empty(); });
      if (arrived <= i) throw SlabReadError(error);
    }
    each(where(i), size_of(i));
    if (!out) {
      {
        std::lock_guard lock(mu);
        consumed = i + 1;
      }
      cv.notify_all();
    }
  }
}

}  // namespace trainrun
