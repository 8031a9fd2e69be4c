// cuda_check: a failed CUDA runtime call as a DeviceError naming the call, the toolkit's words and
// the error number. Shared by the plugin's host files (cuda_backend.cpp, op_events.cpp).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "trainrun/core/errors.h"

namespace trainrun::cuda {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(std::string(what) + ": " + cudaGetErrorString(e) + " (CUDA error " +
                      std::to_string(static_cast<int>(e)) + ")");
}

}  // namespace trainrun::cuda
