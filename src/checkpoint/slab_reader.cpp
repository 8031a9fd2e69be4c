// read_slabs (slab_reader.h): one reader thread ahead of the caller, bounded by a ring of slabs
// when nothing holds the data.
#include "slab_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainrun/core/thread_annotations.h"

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

// A slab to read: where in the file, how much, where to (null: a ring buffer), whose.
struct Piece {
  off_t at;
  size_t size;
  char* dest;
  const ByteSlabFn* each;
  size_t ring_slot;     // for dest == null
  ptrdiff_t waits_for;  // the piece that must be consumed before this one is read (its ring slot's
                        // last user), or -1
};

}  // namespace

void read_slabs(int fd, const std::vector<SlabRange>& ranges, size_t slab) {
  std::vector<Piece> pieces;
  std::vector<size_t> ring_users;  // piece index of each ring-buffered piece, in order
  for (const SlabRange& r : ranges)
    for (size_t off = 0; off < r.bytes; off += slab) {
      Piece p{r.offset + static_cast<off_t>(off),
              std::min(slab, r.bytes - off),
              r.out ? r.out + off : nullptr,
              &r.each,
              0,
              -1};
      if (!p.dest) {
        const size_t q = ring_users.size();
        p.ring_slot = q % kRing;
        if (q >= kRing) p.waits_for = static_cast<ptrdiff_t>(ring_users[q - kRing]);
        ring_users.push_back(pieces.size());
      }
      pieces.push_back(p);
    }
  if (pieces.empty()) return;
  std::vector<char> ring(std::min(ring_users.size(), kRing) * slab);
  auto where = [&](const Piece& p) { return p.dest ? p.dest : ring.data() + p.ring_slot * slab; };

  // What the reader thread and this one tell each other.
  struct Progress {
    Mutex mu;
    CondVar cv;
    size_t arrived GUARDED_BY(mu) = 0;   // pieces read
    size_t consumed GUARDED_BY(mu) = 0;  // pieces handed to their callback
    bool cancel GUARDED_BY(mu) = false;
    std::string error GUARDED_BY(mu);
  } progress;

  std::thread reader([&] {
    Progress& pr = progress;
    off_t hinted_to = 0;  // the kernel was told about the file up to here
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      {
        MutexLock lock(pr.mu);
        while (!pr.cancel && p.waits_for >= 0 && pr.consumed <= static_cast<size_t>(p.waits_for))
          pr.cv.wait(pr.mu);
        if (pr.cancel) return;
      }
      if (p.at + static_cast<off_t>(p.size) > hinted_to) {
        hinted_to = p.at + static_cast<off_t>(kAheadBytes);
        ::posix_fadvise(fd, p.at, static_cast<off_t>(kAheadBytes), POSIX_FADV_WILLNEED);
      }
      std::string why = pread_fully(fd, where(p), p.size, p.at);
      const bool failed = !why.empty();
      {
        MutexLock lock(pr.mu);
        if (failed)
          pr.error = std::move(why);
        else
          pr.arrived = i + 1;
      }
      pr.cv.notify_all();
      if (failed) return;
    }
  });
  // Stops and joins the reader however this function ends.
  struct Join {
    std::thread& t;
    Progress& pr;
    ~Join() {
      {
        MutexLock lock(pr.mu);
        pr.cancel = true;
      }
      pr.cv.notify_all();
      t.join();
    }
  } join{reader, progress};

  for (size_t i = 0; i < pieces.size(); ++i) {
    {
      MutexLock lock(progress.mu);
      while (progress.arrived <= i && progress.error.empty()) progress.cv.wait(progress.mu);
      if (progress.arrived <= i) throw SlabReadError(progress.error);
    }
    (*pieces[i].each)(where(pieces[i]), pieces[i].size);
    {
      MutexLock lock(progress.mu);
      progress.consumed = i + 1;
    }
    progress.cv.notify_all();
  }
}

}  // namespace trainrun
