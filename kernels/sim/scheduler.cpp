// The block scheduler of trainrun's CPU-executed device: runs a launch's blocks one after another
// on the calling host thread, and a block's threads as cooperative fibers (Boost.Context) that
// switch only where CUDA threads must meet: __syncthreads and the warp collectives.
//
// Workers, not a fiber per thread: a worker fiber runs one GPU thread after another until that
// thread blocks; only then does the scheduler need another worker for the next thread. A
// grid-stride kernel without barriers thus runs a whole block on one worker with no switch at
// all, while a block that meets at __syncthreads holds one worker per thread (up to 1024, each
// with its own guarded stack, kept for the process's life).
//
// What a GPU would reject or leave undefined is an error here, reported through cudaGetLastError
// like a kernel fault: a launch over the H200's limits, a warp collective whose mask names an
// exited or missing lane or that lanes reach with different masks, a source lane outside the
// mask, and a deadlock (threads at __syncthreads while others wait in a warp collective).
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "racecheck.h"
#include "scheduler.h"
#include "sim_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace trainrun::sim {
namespace {

namespace bc = boost::context;

// An H200's launch limits (CUDA C Programming Guide, compute capability 9.0).
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535u, 65535u};
constexpr size_t kDefaultDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute
constexpr size_t kMaxDynamicSharedOptin = 227 * 1024;
constexpr size_t kStackBytes = 256 * 1024;  // kernels' frames are small; ASan's are larger
constexpr int kSlotBuffers = 4;

enum class State : uint8_t { unstarted, running, runnable, at_barrier, at_warp, exited };

// Thrown inside a worker to unwind the GPU thread it runs when the launch has failed.
struct KernelAbort {};

struct Warp {
  unsigned exists = 0;   // lanes the block has (a partial last warp has fewer than 32)
  unsigned exited = 0;   // lanes that returned
  unsigned mask = 0;     // of the collective being gathered
  unsigned arrived = 0;  // lanes that reached it
  const char* what = nullptr;
  int buf = 0;
  uint64_t slots[kSlotBuffers][32];
  int readers[kSlotBuffers] = {};  // woken lanes that have not read their buffer yet
};

struct Worker {
  bc::fiber fiber;  // the worker, while suspended
  bc::fiber sched;  // the scheduler, while the worker runs
  int index = 0;    // in Device::workers
  int thread = -1;  // the GPU thread it runs; -1: idle
  int wait_buf = 0;
  void* stack_bottom = nullptr;
  size_t stack_size = 0;
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
#endif
};

struct Block {
  unsigned n = 0;     // threads
  unsigned next = 0;  // first thread not started yet
  unsigned live = 0;  // threads not exited
  unsigned at_barrier = 0;
  std::vector<State> state;
  std::vector<int> worker_of;
  std::vector<Warp> warps;
  std::deque<unsigned> runnable;
  std::string error;  // set: the launch has failed
};

struct Device {
  std::mutex launch_mutex;  // launches are serialised: static shared memory is one per kernel
  const LaunchConfig* cfg = nullptr;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  void* dyn = nullptr;
  Block block;
  std::vector<std::unique_ptr<Worker>> workers;
  Worker* running = nullptr;
  unsigned current = 0;
  std::map<const void*, size_t> max_dynamic_shared;  // cudaFuncSetAttribute
#if defined(__SANITIZE_ADDRESS__)
  void* sched_fake_stack = nullptr;
  const void* host_bottom = nullptr;
  size_t host_size = 0;
#endif
};

// Never destroyed: at exit, destroying the workers would unwind every idle fiber (Boost's
// forced unwind, a jump that AddressSanitizer is not told of), for nothing.
Device& dev() {
  static Device& d = *new Device;
  return d;
}

uint3 coords(unsigned linear, dim3 dim) {
  return {linear % dim.x, (linear / dim.x) % dim.y, linear / (dim.x * dim.y)};
}

std::string str(uint3 v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

std::string hex(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

void set_current(unsigned t) {
  Device& d = dev();
  d.current = t;
  threadIdx = coords(t, blockDim);
}

// ---- fiber switches, told to AddressSanitizer so it tracks which stack is live ----

void resume_worker(Worker* w) {
  Device& d = dev();
  d.running = w;
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&d.sched_fake_stack, w->stack_bottom, w->stack_size);
#endif
  w->fiber = std::move(w->fiber).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(d.sched_fake_stack, nullptr, nullptr);
#endif
  d.running = nullptr;
}

// From inside a worker: back to the scheduler until it resumes this worker.
void yield_to_scheduler(Worker* w) {
#if defined(__SANITIZE_ADDRESS__)
  Device& d = dev();
  __sanitizer_start_switch_fiber(&w->fake_stack, d.host_bottom, d.host_size);
#endif
  w->sched = std::move(w->sched).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(w->fake_stack, &d.host_bottom, &d.host_size);
#endif
}

[[noreturn]] void abort_thread() {
  throw KernelAbort{};
}

// A thread blocks (barrier or collective): run others until the scheduler wakes it again.
void block_here(State s) {
  Device& d = dev();
  Block& b = d.block;
  const unsigned t = d.current;
  b.state[t] = s;
  yield_to_scheduler(d.running);
  if (!b.error.empty()) abort_thread();
  b.state[t] = State::running;
}

void release_barrier() {
  Block& b = dev().block;
  b.at_barrier = 0;
  race::barrier();
  for (unsigned t = 0; t < b.n; ++t)
    if (b.state[t] == State::at_barrier) {
      b.state[t] = State::runnable;
      b.runnable.push_back(t);
    }
}

void thread_exit(unsigned t) {
  Block& b = dev().block;
  b.state[t] = State::exited;
  --b.live;
  Warp& w = b.warps[t / 32];
  w.exited |= 1u << (t % 32);
  if (b.error.empty() && w.arrived != 0 && (w.mask >> (t % 32) & 1u))
    b.error = where(t) + ": exited while lanes " + hex(w.arrived) + " of its warp wait for it in " +
              w.what + " with mask " + hex(w.mask) + " (the GPU's behaviour is undefined)";
  if (b.live > 0 && b.at_barrier == b.live) release_barrier();
}

void worker_main(Worker* w) {
  Device& d = dev();
  for (;;) {
    Block& b = d.block;
    while (b.next < b.n && b.error.empty()) {
      const unsigned t = b.next++;
      w->thread = static_cast<int>(t);
      b.worker_of[t] = w->index;
      set_current(t);
      b.state[t] = State::running;
      try {
        d.body(d.arg);
      } catch (const KernelAbort&) {
      }
      thread_exit(t);
      w->thread = -1;
    }
    yield_to_scheduler(w);  // idle until the next block needs threads started
  }
}

Worker* new_worker() {
  Device& d = dev();
  auto w = std::make_unique<Worker>();
  bc::protected_fixedsize_stack salloc(kStackBytes);
  bc::stack_context sc = salloc.allocate();
  w->stack_size = sc.size;
  w->stack_bottom = static_cast<char*>(sc.sp) - sc.size;
  Worker* raw = w.get();
  raw->index = static_cast<int>(d.workers.size());
  w->fiber = bc::fiber(std::allocator_arg, bc::preallocated(sc.sp, sc.size, sc), salloc,
                       [raw](bc::fiber&& sched) {
                         raw->sched = std::move(sched);
#if defined(__SANITIZE_ADDRESS__)
                         Device& dd = dev();
                         __sanitizer_finish_switch_fiber(nullptr, &dd.host_bottom, &dd.host_size);
#endif
                         worker_main(raw);
                         return std::move(raw->sched);
                       });
  d.workers.push_back(std::move(w));
  return raw;
}

Worker* idle_worker() {
  for (auto& w : dev().workers)
    if (w->thread < 0) return w.get();
  return new_worker();
}

std::string deadlock_report() {
  const Block& b = dev().block;
  std::string s = "deadlock: no thread can run; " + std::to_string(b.at_barrier) + " of " +
                  std::to_string(b.live) + " live threads wait at __syncthreads";
  for (size_t i = 0; i < b.warps.size(); ++i) {
    const Warp& w = b.warps[i];
    if (w.arrived)
      s += "; warp " + std::to_string(i) + ": lanes " + hex(w.arrived) + " wait in " + w.what +
           " for lanes " + hex(w.mask & ~w.arrived);
  }
  return s + " (a barrier or collective that not every thread reaches)";
}

void run_block() {
  Device& d = dev();
  Block& b = d.block;
  const unsigned n = blockDim.x * blockDim.y * blockDim.z;
  b.n = n;
  b.next = 0;
  b.live = n;
  b.at_barrier = 0;
  b.state.assign(n, State::unstarted);
  b.worker_of.assign(n, -1);
  b.warps.assign((n + 31) / 32, Warp{});
  for (size_t i = 0; i < b.warps.size(); ++i) {
    const unsigned lanes = n - 32 * static_cast<unsigned>(i) >= 32 ? 32 : n % 32;
    b.warps[i].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  b.runnable.clear();
  while (b.live > 0 && b.error.empty()) {
    if (!b.runnable.empty()) {
      const unsigned t = b.runnable.front();
      b.runnable.pop_front();
      set_current(t);
      resume_worker(d.workers[static_cast<size_t>(b.worker_of[t])].get());
    } else if (b.next < b.n) {
      resume_worker(idle_worker());  // it starts thread b.next (and more, while none blocks)
    } else {
      b.error = "kernel " + std::string(d.cfg->name) + ", block " + str(blockIdx) + ": " +
                deadlock_report();
    }
  }
  if (!b.error.empty()) {
    // Unwind every thread still blocked: resumed with the error set, each throws KernelAbort.
    for (auto& w : d.workers)
      if (w->thread >= 0) {
        set_current(static_cast<unsigned>(w->thread));
        resume_worker(w.get());
      }
  }
}

bool check_limits(const LaunchConfig& c, std::string* why) {
  const unsigned bd[3] = {c.block.x, c.block.y, c.block.z};
  const unsigned gd[3] = {c.grid.x, c.grid.y, c.grid.z};
  const char* axis = "xyz";
  for (int i = 0; i < 3; ++i) {
    if (bd[i] < 1 || bd[i] > kMaxBlockDim[i]) {
      *why = std::string("blockDim.") + axis[i] + " = " + std::to_string(bd[i]) +
             " is outside 1.." + std::to_string(kMaxBlockDim[i]);
      return false;
    }
    const unsigned most = i == 1 ? max_grid_y() : kMaxGridDim[i];
    if (gd[i] < 1 || gd[i] > most) {
      *why = std::string("gridDim.") + axis[i] + " = " + std::to_string(gd[i]) + " is outside 1.." +
             std::to_string(most);
      return false;
    }
  }
  const uint64_t threads = uint64_t{bd[0]} * bd[1] * bd[2];
  if (threads > kMaxThreadsPerBlock) {
    *why = std::to_string(threads) + " threads per block exceed " +
           std::to_string(kMaxThreadsPerBlock);
    return false;
  }
  return true;
}

}  // namespace

unsigned current_thread() {
  return dev().current;
}

std::string where(unsigned linear) {
  const Device& d = dev();
  return "kernel " + std::string(d.cfg ? d.cfg->name : "?") + ", block " + str(blockIdx) +
         ", thread " + str(coords(linear, blockDim));
}

void fail(const std::string& message) {
  Block& b = dev().block;
  if (b.error.empty()) b.error = where(dev().current) + ": " + message;
  abort_thread();
}

void check_vector_access(const void* p, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  char at[32];
  std::snprintf(at, sizeof at, "%p", p);
  fail("a " + std::to_string(bytes) + "-byte vector access at " + at +
       ", which is not aligned to its size (the GPU faults with misaligned address)");
}

void* dynamic_shared() {
  return dev().dyn;
}

unsigned lane_id() {
  return dev().current % 32;
}

void syncthreads() {
  Block& b = dev().block;
  if (++b.at_barrier == b.live) {
    release_barrier();  // the last to arrive goes on at once
    return;
  }
  block_here(State::at_barrier);
}

const uint64_t* warp_collective(unsigned mask, uint64_t bits, const char* what) {
  Device& d = dev();
  Block& b = d.block;
  const unsigned t = d.current, lane = t % 32;
  Warp& w = b.warps[t / 32];
  if (!(mask >> lane & 1u))
    fail(std::string(what) + " with mask " + hex(mask) + ", which leaves out the calling lane " +
         std::to_string(lane));
  if (mask & ~w.exists)
    fail(std::string(what) + " with mask " + hex(mask) + " names lanes " + hex(mask & ~w.exists) +
         " that this block of " + std::to_string(b.n) + " threads does not have");
  if (mask & w.exited)
    fail(std::string(what) + " with mask " + hex(mask) + " names lanes " + hex(mask & w.exited) +
         " that have exited");
  if (w.arrived == 0) {
    w.mask = mask;
    w.what = what;
    int k = 1;
    while (k <= kSlotBuffers && w.readers[(w.buf + k) % kSlotBuffers] != 0) ++k;
    if (k > kSlotBuffers)
      fail(std::string(what) + ": more collectives in flight than the sim holds");
    w.buf = (w.buf + k) % kSlotBuffers;
  } else if (w.mask != mask) {
    fail(std::string(what) + " with mask " + hex(mask) + " while lanes " + hex(w.arrived) +
         " wait in " + w.what + " with mask " + hex(w.mask));
  }
  w.slots[w.buf][lane] = bits;
  w.arrived |= 1u << lane;
  if (w.arrived == mask) {
    const unsigned others = mask & ~(1u << lane);
    w.arrived = 0;
    w.readers[w.buf] = std::popcount(others);
    for (unsigned l = 0; l < 32; ++l)
      if (others >> l & 1u) {
        const unsigned u = (t & ~31u) + l;
        b.state[u] = State::runnable;
        b.runnable.push_back(u);
      }
    return w.slots[w.buf];
  }
  Worker* me = d.running;
  me->wait_buf = w.buf;
  block_here(State::at_warp);
  // Read before anything else can run (fibers switch only at collectives and barriers).
  --w.readers[me->wait_buf];
  return w.slots[me->wait_buf];
}

uint64_t lane_value(const uint64_t* slots, unsigned mask, unsigned src, const char* what) {
  if (!(mask >> src & 1u))
    fail(std::string(what) + " reads lane " + std::to_string(src) + ", which is not in the mask " +
         hex(mask) + " (the GPU returns an undefined value)");
  return slots[src];
}

cudaError_t set_dynamic_shared_limit(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > kMaxDynamicSharedOptin)
    return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(dev().launch_mutex);
  dev().max_dynamic_shared[kernel] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

void run_grid(const LaunchConfig& cfg, void (*body)(void*), void* arg) {
  Device& d = dev();
  std::lock_guard<std::mutex> lock(d.launch_mutex);
  std::string why;
  if (!check_limits(cfg, &why)) {
    fail_kernel(cudaErrorInvalidConfiguration, cfg.name, ("invalid launch: " + why).c_str());
    return;
  }
  const auto lim = d.max_dynamic_shared.find(cfg.kernel);
  const size_t limit = lim == d.max_dynamic_shared.end() ? kDefaultDynamicShared : lim->second;
  if (cfg.dynamic_shared > limit) {
    fail_kernel(
        cudaErrorInvalidValue, cfg.name,
        ("invalid launch: " + std::to_string(cfg.dynamic_shared) +
         " bytes of dynamic shared memory exceed the kernel's " + std::to_string(limit) +
         (lim == d.max_dynamic_shared.end() ? " (the default; raise it with cudaFuncSetAttribute)"
                                            : " (its cudaFuncAttributeMaxDynamicSharedMemorySize)"))
            .c_str());
    return;
  }
  // Exactly the launch's size, so AddressSanitizer sees an index past the end.
  std::unique_ptr<void, decltype(&std::free)> dyn(
      std::malloc(cfg.dynamic_shared ? cfg.dynamic_shared : 1), &std::free);
  d.cfg = &cfg;
  d.body = body;
  d.arg = arg;
  d.dyn = dyn.get();
  blockDim = cfg.block;
  gridDim = cfg.grid;
  std::string error;
  for (unsigned z = 0; z < cfg.grid.z && error.empty(); ++z)
    for (unsigned y = 0; y < cfg.grid.y && error.empty(); ++y)
      for (unsigned x = 0; x < cfg.grid.x && error.empty(); ++x) {
        blockIdx = {x, y, z};
        if (cfg.dynamic_shared) std::memset(d.dyn, 0xFF, cfg.dynamic_shared);
        race::block_begin(d.dyn, cfg.dynamic_shared);
        d.block.error.clear();
        run_block();
        std::string race = race::block_end();
        error = !d.block.error.empty() ? d.block.error : race;
      }
  d.cfg = nullptr;
  d.dyn = nullptr;
  if (!error.empty()) fail_kernel(cudaErrorLaunchFailure, cfg.name, error.c_str());
}

}  // namespace trainrun::sim

cudaError_t trainrun_sim_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return trainrun::sim::set_dynamic_shared_limit(kernel, value);
}
