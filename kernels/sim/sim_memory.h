// Device memory of trainrun's CPU-executed device, as the sim's own parts (the cuBLASLt and NCCL
// stand-ins, the runtime API) see it: every allocation is one heap block, registered here.
#pragma once

#include <cstddef>

namespace trainrun::sim {

// True when [p, p+bytes) lies inside one live device allocation.
bool is_device_range(const void* p, size_t bytes);

// Makes the next cudaGetLastError (and every later call, until read) report a kernel failure
// with this message, as a GPU reports a fault after the fact; also printed to stderr at once.
void fail_kernel(int cuda_error, const char* kernel, const char* message);

}  // namespace trainrun::sim
