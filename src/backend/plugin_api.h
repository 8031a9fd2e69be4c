// The C ABI between trainrun and its CUDA plugin libtrainrun_cuda.so: implemented by the plugin
// (kernels/), loaded with dlopen by cuda_loader.cpp; private to the two. Plain extern "C"
// symbols so dlsym finds them by name; the objects they return are C++ (trainrun::Backend,
// trainrun::Communicator) and are safe to use across the boundary because trainrun and the plugin
// are built by the same compiler from the same headers. Bump kTrainrunCudaAbiVersion whenever a
// signature here or a class in backend.h/comm.h changes. Errors: functions that can fail write a
// message (always NUL-terminated) into err[0..errlen).
#pragma once

#include <cstddef>

namespace trainrun {
class Backend;
class Communicator;
}  // namespace trainrun

// 4: residual norms, op timing, attention and rope overwrite; 5: kNoId ids and targets;
// 6: matmul_backward without dw (the input gradient alone); the plugin chooses the GPU
constexpr int kTrainrunCudaAbiVersion = 6;
constexpr size_t kTrainrunNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

extern "C" {

int trainrun_cuda_abi_version();

// A new CUDA backend for the rank at `local_rank` on its node, on the GPU kernels/gpu_binding.h
// chooses among the visible ones (delete it through Backend's virtual destructor), or null with
// the reason (no driver: cudaGetDeviceCount error 35; no GPU; cuBLASLt failed).
trainrun::Backend* trainrun_cuda_create_backend(int local_rank, char* err, size_t errlen);

// ncclGetUniqueId on rank 0, to be broadcast (e.g. over MPI) to every rank. 0 on success.
int trainrun_nccl_unique_id(char out[kTrainrunNcclIdBytes], char* err, size_t errlen);

// A NCCL communicator for CUDA tensors on the backend's GPU (kernels/gpu_binding.h), or null with
// a reason.
trainrun::Communicator* trainrun_nccl_create(const char id[kTrainrunNcclIdBytes], int rank,
                                             int size, int local_rank, char* err, size_t errlen);

}  // extern "C"

using trainrun_cuda_abi_version_fn = int (*)();
using trainrun_cuda_create_backend_fn = trainrun::Backend* (*)(int, char*, size_t);
using trainrun_nccl_unique_id_fn = int (*)(char*, char*, size_t);
using trainrun_nccl_create_fn = trainrun::Communicator* (*)(const char*, int, int, int, char*,
                                                            size_t);
