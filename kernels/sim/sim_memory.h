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

// The largest gridDim.y a launch may have: an H200's 65,535, or TRAINRUN_SIM_MAX_GRID_Y (1..65535)
// for a test of a kernel's fold past the limit at a shape the sim runs in seconds.
unsigned max_grid_y();

}  // namespace trainrun::sim
