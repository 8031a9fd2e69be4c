// The sim's shared-memory race checker: compute-sanitizer's racecheck (and its initcheck for
// shared memory), on the CPU.
//
// How it sees the accesses: the kernels' translation units are compiled with GCC's
// -fsanitize=thread instrumentation but linked without ThreadSanitizer's runtime; the hooks that
// instrumentation calls before every load and store (__tsan_read4, __tsan_write8, ...) are
// defined here. Each hook costs a call and two range compares for memory that is not shared.
// ThreadSanitizer itself cannot be the detector: it watches OS threads, and the sim's GPU threads
// are fibers on one OS thread.
//
// What it checks: the block's shared memory (static __shared__ arrays, which are thread_locals
// here (sim_device.h), so this thread's TLS block of the module holding the kernels; and the
// launch's dynamic shared memory) has one shadow cell per byte: the last writer and the
// last reader, each with the barrier interval (epoch) of its access. Two accesses to one byte in
// the same interval by different threads, at least one a write, are a hazard (read-after-write,
// write-after-read, write-after-write), exactly what a missing __syncthreads produces; a read of
// a byte no thread of the block has written is an uninitialised read. Atomics are not plain
// accesses (atomics.cpp is not instrumented), so they never count, as in compute-sanitizer.
// Warp-synchronous sharing without a barrier counts as a hazard: since Volta it needs __syncwarp,
// which this checker does not treat as an interval boundary (no kernel here relies on it).
#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "racecheck.h"
#include "scheduler.h"

namespace trainrun::sim::race {
namespace {

constexpr uint16_t kNobody = 0xFFFF;

struct Cell {
  uint32_t write_epoch = 0, read_epoch = 0;
  uint16_t writer = kNobody, reader = kNobody;
  bool many_readers = false;
};

struct Region {
  uintptr_t lo = 0;
  size_t len = 0;
  std::vector<Cell> shadow;
  const char* name = "";
};

struct Checker {
  bool active = false;
  uint32_t epoch = 0;        // the current barrier interval
  uint32_t block_epoch = 0;  // the interval the block started in
  Region stat, dyn;
  std::string first;  // the block's first hazard
  size_t more = 0;    // and how many after it
};

Checker& checker() {
  static Checker c;
  return c;
}

// This thread's TLS block of the module this file (and the kernels) are linked into: where the
// static __shared__ arrays live. The module's other thread_locals are the runtime's, which no
// instrumented (kernel) code touches, so watching the whole block watches the shared arrays.
thread_local char tls_anchor;  // also makes sure the block is allocated for this thread

struct TlsBlock {
  uintptr_t lo = 0;
  size_t len = 0;
};

TlsBlock module_tls() {
  tls_anchor = 0;
  Dl_info self{};
  TlsBlock found;
  if (!dladdr(reinterpret_cast<void*>(&module_tls), &self)) return found;
  struct Search {
    const void* base;
    TlsBlock* out;
  } search{self.dli_fbase, &found};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) {
        auto* s = static_cast<Search*>(p);
        // dli_fbase is where the module is mapped; dlpi_addr its load bias: find the module
        // whose loaded segments contain the base.
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && reinterpret_cast<uintptr_t>(s->base) >= lo &&
              reinterpret_cast<uintptr_t>(s->base) < lo + ph.p_memsz) {
            for (int j = 0; j < info->dlpi_phnum; ++j)
              if (info->dlpi_phdr[j].p_type == PT_TLS && info->dlpi_tls_data) {
                s->out->lo = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
                s->out->len = info->dlpi_phdr[j].p_memsz;
              }
            return 1;
          }
        }
        return 0;
      },
      &search);
  return found;
}

void next_epoch(Checker& c) {
  if (++c.epoch == UINT32_MAX) {  // wrap: forget every old access
    for (Region* r : {&c.stat, &c.dyn}) std::fill(r->shadow.begin(), r->shadow.end(), Cell{});
    c.epoch = 1;
    c.block_epoch = 1;
  }
}

std::string thread_name(uint16_t t) {
  const std::string w = where(t);
  return w.substr(w.rfind("thread "));
}

void report(Checker& c, const Region& r, size_t offset, const char* kind, uint16_t other,
            const char* other_did) {
  if (!c.first.empty()) {
    ++c.more;
    return;
  }
  char off[32];
  std::snprintf(off, sizeof off, "%s + 0x%zx", r.name, offset);
  c.first = "racecheck: " + std::string(kind) + " on " + off + ": " + where(current_thread());
  if (other != kNobody)
    c.first += ", " + std::string(other_did) + " by " + thread_name(other) +
               " with no __syncthreads between";
}

void check_access(uintptr_t a, size_t size, bool write) {
  Checker& c = checker();
  if (!c.active) return;
  Region* r = nullptr;
  if (a - c.stat.lo < c.stat.len)
    r = &c.stat;
  else if (a - c.dyn.lo < c.dyn.len)
    r = &c.dyn;
  else
    return;
  const size_t off = a - r->lo;
  const size_t end = off + size < r->len ? off + size : r->len;
  const auto t = static_cast<uint16_t>(current_thread());
  for (size_t i = off; i < end; ++i) {
    Cell& cell = r->shadow[i];
    if (write) {
      if (cell.write_epoch == c.epoch && cell.writer != t)
        report(c, *r, i, "write-after-write hazard", cell.writer, "written");
      else if (cell.read_epoch == c.epoch && (cell.reader != t || cell.many_readers))
        report(c, *r, i, "write-after-read hazard", cell.reader != t ? cell.reader : kNobody,
               "read");
      cell.write_epoch = c.epoch;
      cell.writer = t;
    } else {
      if (cell.write_epoch < c.block_epoch)
        report(c, *r, i, "read of shared memory no thread of the block wrote", kNobody, "");
      else if (cell.write_epoch == c.epoch && cell.writer != t)
        report(c, *r, i, "read-after-write hazard", cell.writer, "written");
      if (cell.read_epoch == c.epoch) {
        cell.many_readers |= cell.reader != t;
      } else {
        cell.read_epoch = c.epoch;
        cell.reader = t;
        cell.many_readers = false;
      }
    }
  }
}

}  // namespace

void block_begin(void* dyn, size_t dynamic) {
  Checker& c = checker();
  c.stat.name = "static shared";
  static thread_local const TlsBlock tls = module_tls();
  c.stat.lo = tls.lo;
  c.stat.len = tls.len;
  if (c.stat.shadow.size() < c.stat.len) c.stat.shadow.resize(c.stat.len);
  c.dyn.name = "dynamic shared";
  c.dyn.lo = reinterpret_cast<uintptr_t>(dyn);
  c.dyn.len = dynamic;
  if (c.dyn.shadow.size() < dynamic) c.dyn.shadow.resize(dynamic);
  next_epoch(c);
  c.block_epoch = c.epoch;
  c.first.clear();
  c.more = 0;
  c.active = true;
}

void barrier() {
  next_epoch(checker());
}

std::string block_end() {
  Checker& c = checker();
  c.active = false;
  if (c.more) c.first += " (and " + std::to_string(c.more) + " more hazards in this block)";
  return c.first;
}

}  // namespace trainrun::sim::race

// ---- the hooks GCC's -fsanitize=thread instrumentation calls ----
extern "C" {
using trainrun::sim::race::check_access;
#define TRAINRUN_SIM_HOOKS(n)                               \
  void __tsan_read##n(void* a) {                            \
    check_access(reinterpret_cast<uintptr_t>(a), n, false); \
  }                                                         \
  void __tsan_write##n(void* a) {                           \
    check_access(reinterpret_cast<uintptr_t>(a), n, true);  \
  }                                                         \
  void __tsan_unaligned_read##n(void* a) {                  \
    check_access(reinterpret_cast<uintptr_t>(a), n, false); \
  }                                                         \
  void __tsan_unaligned_write##n(void* a) {                 \
    check_access(reinterpret_cast<uintptr_t>(a), n, true);  \
  }
TRAINRUN_SIM_HOOKS(1)
TRAINRUN_SIM_HOOKS(2)
TRAINRUN_SIM_HOOKS(4)
TRAINRUN_SIM_HOOKS(8)
TRAINRUN_SIM_HOOKS(16)
#undef TRAINRUN_SIM_HOOKS
void __tsan_read_range(void* a, unsigned long size) {
  check_access(reinterpret_cast<uintptr_t>(a), size, false);
}
void __tsan_write_range(void* a, unsigned long size) {
  check_access(reinterpret_cast<uintptr_t>(a), size, true);
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
}
