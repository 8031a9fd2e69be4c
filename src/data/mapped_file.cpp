// MappedFile and its SIGBUS handler (mapped_file.h).
#include "mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

// The live mappings, read by the handler. A slot's path is null when free and kClaimed while
// its owner fills it in; the handler reads only slots with a real path (atomics only: a
// signal handler may take no lock). A run maps at most a few thousand shards; past the table's
// size a mapping goes unregistered, and a fault in it is the default SIGBUS.
constexpr int kSlots = 16384;
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<const char*> path{nullptr};
};
Slot g_slots[kSlots];
const char kClaimedMark = 0;
const char* const kClaimed = &kClaimedMark;

struct sigaction g_previous;
std::atomic<bool> g_installed{false};

constexpr const char kHow[] =
    ": the file changed while trainrun read it (truncated, or overwritten in place as `cp new "
    "old` does), so part of it is gone (SIGBUS). Restore it, or write a new version under "
    "another name and rename it over the old one, then resume the run\n";

void write_all(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// Only async-signal-safe calls: write(2) and _exit(2). It cannot unwind to a catch instead:
// the fault may come on any thread (an OpenMP worker scanning a shard, the prefetch thread),
// and siglongjmp out of a handler on a thread inside an OpenMP region, or across frames that
// hold locks, is undefined; nothing the process holds is worth saving once its input is gone.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const char* path = s.path.load(std::memory_order_acquire);
    if (path == nullptr || path == kClaimed) continue;
    if (addr >= s.begin.load(std::memory_order_relaxed) &&
        addr < s.end.load(std::memory_order_relaxed)) {
      write_all("error: ", 7);
      write_all(path, std::strlen(path));
      write_all(kHow, sizeof kHow - 1);
      ::_exit(kExitData);
    }
  }
  // Not a mapped file's: what was there before. The default action (or an ignored SIGBUS, which
  // cannot be ignored for a fault) ends the process with the signal once the access is retried.
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
  } else {
    ::signal(sig, SIG_DFL);
  }
}

void install_handler() {
  if (g_installed.exchange(true)) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous);
}

int register_mapping(const void* map, size_t len, const char* path) {
  install_handler();
  for (int i = 0; i < kSlots; ++i) {
    const char* expected = nullptr;
    if (!g_slots[i].path.compare_exchange_strong(expected, kClaimed)) continue;
    g_slots[i].begin.store(reinterpret_cast<uintptr_t>(map), std::memory_order_relaxed);
    g_slots[i].end.store(reinterpret_cast<uintptr_t>(map) + len, std::memory_order_relaxed);
    g_slots[i].path.store(path, std::memory_order_release);
    return i;
  }
  return -1;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const char* what, size_t min_bytes,
                       const std::string& too_short)
    : path_(path) {
  // O_NONBLOCK: opening a FIFO named by mistake must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw DataError(fmt::format("{}: cannot open the {} ({}); check the path", path, what,
                                std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(
        fmt::format("{}: the {} is not a regular file (a device, FIFO or directory)", path, what));
  }
  len_ = static_cast<size_t>(st.st_size);
  if (len_ < min_bytes || len_ == 0) {
    ::close(fd);
    throw DataError(!too_short.empty()
                        ? too_short
                        : fmt::format("{}: the {} is {} bytes, too short", path, what, len_));
  }
  map_ = ::mmap(nullptr, len_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw DataError(fmt::format("{}: cannot map the {} ({})", path, what, std::strerror(map_err)));
  }
  slot_ = register_mapping(map_, len_, path_.c_str());
}

MappedFile::~MappedFile() {
  // Out of the table before the range can be mapped again for another file.
  if (slot_ >= 0) g_slots[slot_].path.store(nullptr, std::memory_order_release);
  ::munmap(map_, len_);
}

void MappedFile::advise(int advice) const {
  ::madvise(map_, len_, advice);
}

}  // namespace trainrun
