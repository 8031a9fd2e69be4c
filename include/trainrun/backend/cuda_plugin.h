// Access to the CUDA plugin (libtrainrun_cuda.so, loaded beside the executable by
// src/backend/cuda_loader.cpp) beyond make_cuda_backend: the NCCL communicator it implements.
// The plugin is loaded once per process and never unloaded (objects it made must outlive us).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "trainrun/comm/comm.h"

namespace trainrun {

using NcclId = std::array<char, 128>;

// True when the plugin loads and speaks our ABI; otherwise false with the reason in why_not.
// (Loading needs no GPU; creating a backend or communicator does.)
bool cuda_plugin_available(std::string* why_not);

// Whether an NVIDIA driver (libcuda.so.1) can be loaded, which any GPU needs; otherwise false
// with the reason in why_not. True when TRAINRUN_CUDA_PLUGIN names a plugin: that plugin
// decides (the CPU-executed device needs no driver). `device: auto` asks this first, so a
// machine without a driver never maps the CUDA runtime and cuBLASLt (160 MiB per process).
bool cuda_driver_present(std::string* why_not);

// ncclGetUniqueId, on rank 0 only; broadcast the result to the other ranks (e.g. over MPI).
// Throws DeviceError when the plugin is missing or NCCL fails.
NcclId nccl_unique_id();

// A NCCL communicator for CUDA tensors on GPU local_rank (modulo the visible GPUs). Every rank
// calls it with the same id. Throws DeviceError when the plugin, a GPU or NCCL fails.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclId& id, int rank, int size,
                                                     int local_rank);

}  // namespace trainrun
