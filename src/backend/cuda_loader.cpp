// Loads the CUDA backend plugin. trainrun never links CUDA itself: libtrainrun_cuda.so (built
// from kernels/ when nvcc is present) sits beside the executable and is dlopen()ed on demand, so
// the same binary starts on machines without a driver, CUDA libraries or the plugin, and says
// which one is missing when a run asks for cuda. Search order: $TRAINRUN_CUDA_PLUGIN (a full
// path), then beside the executable (the installed layout), then the build tree's kernels/
// folder seen from the build root or from tests/ (so ./build/trainrun and the unit tests find
// a freshly built plugin without installing). The handle is opened once and never closed:
// backends and communicators the plugin creates have their code (vtables) in it.
#include <dlfcn.h>
#include <unistd.h>

#include <sys/stat.h>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "plugin_api.h"
#include "trainrun/backend/backend.h"
#include "trainrun/backend/cuda_plugin.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

constexpr const char* kPluginName = "libtrainrun_cuda.so";

struct Plugin {
  void* handle = nullptr;
  std::string error;  // why handle is null
};

std::string exe_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

Plugin open_plugin() {
  Plugin p;
  const std::string dir = exe_dir();
  std::string path;
  if (const char* env = std::getenv("TRAINRUN_CUDA_PLUGIN"); env && *env) {
    path = env;
    if (!exists(path)) {
      p.error = "TRAINRUN_CUDA_PLUGIN=" + path + " does not exist (point it at " +
                std::string(kPluginName) + " or unset it)";
      return p;
    }
  } else {
    for (const std::string& cand : {dir + "/" + kPluginName, dir + "/kernels/" + kPluginName,
                                    dir + "/../kernels/" + kPluginName})
      if (exists(cand)) {
        path = cand;
        break;
      }
  }
  if (path.empty()) {
    p.error = std::string("the CUDA plugin ") + kPluginName + " is not installed beside " + dir +
              " (build with -Dcuda=enabled on a machine with the CUDA toolkit)";
    return p;
  }
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    p.error = "cannot load the CUDA plugin " + path + ": " + (e ? e : "unknown dlopen error") +
              " (are the CUDA 13 runtime, cuBLAS and NCCL libraries on the library path?)";
    return p;
  }
  auto version =
      reinterpret_cast<trainrun_cuda_abi_version_fn>(dlsym(h, "trainrun_cuda_abi_version"));
  if (!version || version() != kTrainrunCudaAbiVersion) {
    p.error = "the CUDA plugin " + path + " was built for another trainrun (plugin ABI " +
              (version ? std::to_string(version()) : std::string("unknown")) + ", expected " +
              std::to_string(kTrainrunCudaAbiVersion) + "): rebuild and reinstall both together";
    dlclose(h);
    return p;
  }
  p.handle = h;
  return p;
}

const Plugin& plugin() {
  static const Plugin p = open_plugin();  // thread-safe, once per process
  return p;
}

template <class Fn>
Fn symbol(const char* name) {
  const Plugin& p = plugin();
  if (!p.handle) throw DeviceError(p.error);
  void* s = dlsym(p.handle, name);
  if (!s)
    throw DeviceError(std::string("the CUDA plugin lacks ") + name +
                      ": rebuild and reinstall trainrun and libtrainrun_cuda.so together");
  return reinterpret_cast<Fn>(s);
}

}  // namespace

bool cuda_driver_present(std::string* why_not) {
  if (const char* env = std::getenv("TRAINRUN_CUDA_PLUGIN"); env && *env) return true;
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    if (why_not) *why_not = "no NVIDIA driver: libcuda.so.1 is not on this machine's library path";
    return false;
  }
  dlclose(h);
  return true;
}

bool cuda_plugin_available(std::string* why_not) {
  const Plugin& p = plugin();
  if (!p.handle && why_not) *why_not = p.error;
  return p.handle != nullptr;
}

std::unique_ptr<Backend> make_cuda_backend(int local_rank, std::string* why_not) {
  std::string why;
  std::unique_ptr<Backend> be;
  try {
    auto create = symbol<trainrun_cuda_create_backend_fn>("trainrun_cuda_create_backend");
    char err[1024] = {};
    be.reset(create(local_rank, err, sizeof err));
    if (!be) why = err[0] ? err : "the CUDA plugin could not create a backend";
  } catch (const DeviceError& e) {
    why = e.what();
  }
  if (!be && why_not) *why_not = why;
  return be;
}

NcclId nccl_unique_id() {
  auto fn = symbol<trainrun_nccl_unique_id_fn>("trainrun_nccl_unique_id");
  NcclId id{};
  char err[1024] = {};
  if (fn(id.data(), err, sizeof err) != 0) throw DeviceError(err);
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int rank, int size,
                                                     int local_rank) {
  auto fn = symbol<trainrun_nccl_create_fn>("trainrun_nccl_create");
  char err[1024] = {};
  std::unique_ptr<Communicator> c(fn(id.data(), rank, size, local_rank, err, sizeof err));
  if (!c) throw DeviceError(err[0] ? err : "the CUDA plugin could not create a NCCL communicator");
  return c;
}

}  // namespace trainrun
