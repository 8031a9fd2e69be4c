// make_cuda_backend on this machine: it must never crash or throw, and must say why there is no
// backend. Run where the plugin is absent (a -Dcuda=disabled build) it names the plugin; where
// the plugin is built but no driver or GPU exists it passes on the CUDA runtime's reason. On a
// machine with a GPU it must return a working backend (checked with a tiny round trip).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/backend/cuda_plugin.h"
#include "trainrun/core/errors.h"

using namespace trainrun;

TEST_CASE("make_cuda_backend returns a backend or says why not") {
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) {
    MESSAGE("no CUDA backend here: " << why);
    CHECK_FALSE(why.empty());
    const bool names_cause = why.find("libtrainrun_cuda.so") != std::string::npos ||
                             why.find("driver") != std::string::npos ||
                             why.find("cudaGetDeviceCount") != std::string::npos ||
                             why.find("CUDA device") != std::string::npos;
    CHECK_MESSAGE(names_cause, why);
    return;
  }
  CHECK(be->device() == Device::cuda);
  std::vector<float> host = {1, 2, 3, 4}, back(4, 0);
  void* d = be->alloc(sizeof(float) * 4);
  Tensor h(host.data(), DType::f32, Device::cpu, {4});
  Tensor dev(d, DType::f32, Device::cuda, {4});
  be->copy(dev, h);
  CHECK(be->sum(dev) == doctest::Approx(10.0));
  be->scale(dev, 2.0);
  be->copy(Tensor(back.data(), DType::f32, Device::cpu, {4}), dev);
  CHECK(back[3] == 8.0f);
  be->release(d);
}

TEST_CASE("a missing plugin or GPU gives a clear error, never a crash") {
  std::string why;
  if (cuda_plugin_available(&why)) {
    MESSAGE("the CUDA plugin is installed beside the test binary");
    std::string why_backend;
    if (make_cuda_backend(0, &why_backend)) return;  // a GPU machine
    // No driver or GPU: NCCL ids still work (host-side), creating a communicator must throw.
    CHECK_NOTHROW(nccl_unique_id());
    CHECK_THROWS_AS(make_nccl_communicator(nccl_unique_id(), 0, 1, 0), DeviceError);
  } else {
    CHECK(why.find("libtrainrun_cuda.so") != std::string::npos);
    CHECK_THROWS_AS(nccl_unique_id(), DeviceError);
  }
}

TEST_CASE("device auto looks for a driver before it loads the plugin") {
  std::string why;
  const bool driver = cuda_driver_present(&why);
  if (!driver) {
    CHECK(why.find("libcuda.so.1") != std::string::npos);
    // No driver, no GPU: the plugin (if built) agrees, so skipping it changes no outcome.
    std::string why_backend;
    CHECK(make_cuda_backend(0, &why_backend) == nullptr);
  }
  // A plugin named explicitly (the CPU-executed device needs no driver) decides for itself.
  const char* old = std::getenv("TRAINRUN_CUDA_PLUGIN");
  const std::string saved = old ? old : "";
  ::setenv("TRAINRUN_CUDA_PLUGIN", "/nonexistent/libtrainrun_cuda.so", 1);
  CHECK(cuda_driver_present(nullptr));
  if (old)
    ::setenv("TRAINRUN_CUDA_PLUGIN", saved.c_str(), 1);
  else
    ::unsetenv("TRAINRUN_CUDA_PLUGIN");
}
