// The CUDA runtime API of trainrun's CPU-executed device: one simulated GPU with an H200's limits,
// device memory as separately allocated heap blocks (so AddressSanitizer guards each), every
// byte of a new allocation 0xFF (NaN in f32 and bf16: what a kernel reads without anyone having
// written it shows up in the comparison against the CPU), copies and memsets checked against the
// allocations they touch, and the errors a kernel "fault" leaves for the next call, as a GPU does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "sim_memory.h"

namespace trainrun::sim {
namespace {

constexpr size_t kAlignment = 256;                   // what cudaMalloc guarantees
constexpr size_t kDeviceMemory = size_t{141} << 30;  // an H200's 141 GB
// An 8-GPU node by default; all of its devices share this process's memory and scheduler.
// TRAINRUN_SIM_DEVICES=N (1..64) sets another count, for tests of what a too-small node does.
int physical_devices() {
  static const int n = [] {
    const char* env = std::getenv("TRAINRUN_SIM_DEVICES");
    const int v = env ? std::atoi(env) : 8;
    return v >= 1 && v <= 64 ? v : 8;
  }();
  return n;
}

// The devices this process sees, as the driver reads CUDA_VISIBLE_DEVICES: a comma-separated list
// of device indices, of which the entries before the first invalid one (not a number, no such
// device, a repeat) are visible, renumbered from 0; unset, all of them. TRAINRUN_SIM_GPU_BIND=
// map_gpu:A,B,... stands in for the launcher that sets CUDA_VISIBLE_DEVICES per task (Slurm's
// --gpu-bind=map_gpu, which gives task i the i-th listed GPU): this process's entry is the one
// at its local rank (OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID), cycling.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

const std::vector<int>& visible_devices() {
  static const std::vector<int> v = [] {
    std::string list;
    bool listed = false;
    if (const char* bind = std::getenv("TRAINRUN_SIM_GPU_BIND")) {
      const std::string b = bind, prefix = "map_gpu:";
      const std::vector<std::string> entries = b.rfind(prefix, 0) == 0
                                                   ? split_commas(b.substr(prefix.size()))
                                                   : std::vector<std::string>{};
      const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      if (!lr) lr = std::getenv("SLURM_LOCALID");
      const size_t local = lr ? static_cast<size_t>(std::max(0, std::atoi(lr))) : 0;
      list = entries.empty() ? "" : entries[local % entries.size()];
      listed = true;
    } else if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
      list = env;
      listed = true;
    }
    std::vector<int> out;
    if (!listed) {
      for (int d = 0; d < physical_devices(); ++d) out.push_back(d);
      return out;
    }
    for (const std::string& e : split_commas(list)) {
      char* end = nullptr;
      const long d = std::strtol(e.c_str(), &end, 10);
      if (e.empty() || *end != '\0' || d < 0 || d >= physical_devices() ||
          std::find(out.begin(), out.end(), static_cast<int>(d)) != out.end())
        break;
      out.push_back(static_cast<int>(d));
    }
    return out;
  }();
  return v;
}

int device_count() {
  return static_cast<int>(visible_devices().size());
}

}  // namespace

unsigned max_grid_y() {
  static const unsigned y = [] {
    const char* env = std::getenv("TRAINRUN_SIM_MAX_GRID_Y");
    const long v = env ? std::atol(env) : 65535;
    return v >= 1 && v <= 65535 ? static_cast<unsigned>(v) : 65535u;
  }();
  return y;
}

namespace {

int& current_device() {
  static thread_local int d = 0;  // the runtime's current device is per host thread
  return d;
}

struct Memory {
  std::mutex mutex;
  std::map<uintptr_t, size_t> blocks;  // start -> bytes
};

Memory& memory() {
  static Memory m;
  return m;
}

// The last error, as cudaGetLastError reports and clears it, with the sim's detail for
// cudaGetErrorString. A kernel failure is also `pending`: like a GPU fault it is returned by the
// next call that waits for the device (memcpy, synchronize), while a failed API call's error is
// that call's alone.
struct LastError {
  std::mutex mutex;
  cudaError_t code = cudaSuccess;
  cudaError_t pending = cudaSuccess;
  std::string detail;
};

LastError& last_error() {
  static LastError e;
  return e;
}

cudaError_t set_error(cudaError_t e, const std::string& detail) {
  LastError& le = last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  le.code = e;
  le.detail = detail;
  return e;
}

// A kernel failure waits for the next call that synchronises, as on a GPU.
cudaError_t take_pending() {
  LastError& le = last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  const cudaError_t e = le.pending;
  le.pending = cudaSuccess;
  if (le.code == e) le.code = cudaSuccess;
  return e;
}

// Where [p, p+bytes) lies: 1 inside one allocation, 0 outside every one, -1 straddling an edge.
int locate(const void* p, size_t bytes) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.blocks.upper_bound(a);
  if (it == m.blocks.begin()) return 0;
  --it;
  if (a >= it->first + it->second) return 0;
  return a + bytes <= it->first + it->second ? 1 : -1;
}

cudaError_t check_range(const void* p, size_t bytes, bool device, const char* call,
                        const char* which) {
  const int where = locate(p, bytes);
  if (where == 1 || (!device && where == 0)) return cudaSuccess;
  return set_error(
      cudaErrorInvalidValue,
      std::string(call) + ": " + which + " " + std::to_string(bytes) + " bytes at " +
          std::to_string(reinterpret_cast<uintptr_t>(p)) +
          (where < 0 ? " run past the end of their device allocation" : " are not device memory"));
}

}  // namespace

bool is_device_range(const void* p, size_t bytes) {
  return locate(p, bytes) == 1;
}

void fail_kernel(int cuda_error, const char* kernel, const char* message) {
  // Reports from inside a block already say "kernel NAME, block ..., thread ...".
  const std::string named = std::string("kernel ") + kernel;
  const std::string detail = std::string(message).find(named) != std::string::npos
                                 ? std::string("cudasim: ") + message
                                 : "cudasim: " + named + ": " + message;
  std::fprintf(stderr, "%s\n", detail.c_str());
  std::fflush(stderr);
  set_error(static_cast<cudaError_t>(cuda_error), detail);
  LastError& le = last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  le.pending = static_cast<cudaError_t>(cuda_error);
}

}  // namespace trainrun::sim

using trainrun::sim::check_range;
using trainrun::sim::set_error;
using trainrun::sim::take_pending;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = trainrun::sim::device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= trainrun::sim::device_count())
    return set_error(cudaErrorInvalidDevice, "cudaSetDevice");
  trainrun::sim::current_device() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = trainrun::sim::current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= trainrun::sim::device_count())
    return set_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "%s", "cudasim: CPU-executed, H200 limits");
  prop->totalGlobalMem = trainrun::sim::kDeviceMemory;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = static_cast<int>(trainrun::sim::max_grid_y());
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  // Which physical device this is, as a GPU's UUID names it: the same in every process that
  // sees it, whatever its ordinal there.
  const int physical = trainrun::sim::visible_devices()[static_cast<size_t>(device)];
  std::memset(prop->uuid.bytes, 0, sizeof prop->uuid.bytes);
  std::memcpy(prop->uuid.bytes, "cudasim", 7);
  prop->uuid.bytes[15] = static_cast<char>(physical);
  prop->pciBusID = 0x18 + physical;
  prop->pciDeviceID = 0;
  prop->pciDomainID = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= trainrun::sim::device_count())
    return set_error(cudaErrorInvalidDevice, "cudaDeviceGetAttribute");
  if (!value || attr != cudaDevAttrMaxGridDimY)
    return set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute");
  *value = static_cast<int>(trainrun::sim::max_grid_y());
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pci_bus_id, int len, int device) {
  if (device < 0 || device >= trainrun::sim::device_count())
    return set_error(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId");
  if (!pci_bus_id || len < 13) return set_error(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId");
  const int physical = trainrun::sim::visible_devices()[static_cast<size_t>(device)];
  std::snprintf(pci_bus_id, static_cast<size_t>(len), "0000:%02x:00.0", 0x18 + physical);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  return take_pending();
}

cudaError_t cudaGetLastError() {
  auto& le = trainrun::sim::last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  const cudaError_t e = le.code;
  le.code = le.pending = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  auto& le = trainrun::sim::last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  return le.code;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    default:
      return "cudaErrorUnknown";
  }
}

// The toolkit's wording, then what the sim found (the last failure's detail).
const char* cudaGetErrorString(cudaError_t error) {
  static thread_local std::string text;
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      text = "invalid argument";
      break;
    case cudaErrorMemoryAllocation:
      text = "out of memory";
      break;
    case cudaErrorInvalidConfiguration:
      text = "invalid configuration argument";
      break;
    case cudaErrorInvalidDevice:
      text = "invalid device ordinal";
      break;
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorLaunchFailure:
      text = "unspecified launch failure";
      break;
    default:
      text = "unknown error";
  }
  auto& le = trainrun::sim::last_error();
  std::lock_guard<std::mutex> lock(le.mutex);
  if (!le.detail.empty()) text += " (" + le.detail + ")";
  return text.c_str();
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes > trainrun::sim::kDeviceMemory)
    return set_error(cudaErrorMemoryAllocation, "cudaMalloc: more than the device holds");
  void* p = nullptr;
  // Exactly `bytes`: AddressSanitizer's red zone starts at the first byte past the allocation.
  if (posix_memalign(&p, trainrun::sim::kAlignment, bytes ? bytes : 1) != 0)
    return set_error(cudaErrorMemoryAllocation, "cudaMalloc: host memory exhausted");
  std::memset(p, 0xFF, bytes);
  auto& m = trainrun::sim::memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  m.blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto& m = trainrun::sim::memory();
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.blocks.erase(reinterpret_cast<uintptr_t>(ptr)) == 0)
      return set_error(cudaErrorInvalidValue, "cudaFree: not the start of a device allocation");
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  auto& m = trainrun::sim::memory();
  std::lock_guard<std::mutex> lock(m.mutex);
  size_t used = 0;
  for (const auto& [p, bytes] : m.blocks) used += bytes;
  *total = trainrun::sim::kDeviceMemory;
  *free = used < *total ? *total - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = take_pending(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToHost) {
    if (const cudaError_t e = check_range(dst, bytes, dst_dev, "cudaMemcpy", "destination");
        e != cudaSuccess)
      return e;
    if (const cudaError_t e = check_range(src, bytes, src_dev, "cudaMemcpy", "source");
        e != cudaSuccess)
      return e;
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = check_range(ptr, bytes, true, "cudaMemset", "destination");
      e != cudaSuccess)
    return e;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

// Streams and events: work is done when it is issued, so streams only need to exist, and an
// event's time is the host's clock when it is recorded (all work before it is done then).
struct CUstream_st {};
struct CUevent_st {
  bool timing = true;  // created without cudaEventDisableTiming
  bool recorded = false;
  std::chrono::steady_clock::time_point at;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return take_pending();
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st;
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return cudaErrorInvalidResourceHandle;
  event->recorded = true;
  event->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? take_pending() : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end || !start->timing || !end->timing || !start->recorded ||
      !end->recorded) {
    return set_error(cudaErrorInvalidResourceHandle,
                     "cudaEventElapsedTime: an event is null, was created with "
                     "cudaEventDisableTiming, or was never recorded");
  }
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
