// Which GPU a rank uses, chosen by one rule for every launcher's layout of visible devices, and
// how the log names it. The backend and the NCCL communicator both ask here, so they never
// disagree (they once did: GPU local_rank against local_rank % count).
#pragma once

#include <cstdio>
#include <string>

#include "cuda_check.h"

namespace trainrun::cuda {

// GPU local_rank % count of the `count` devices this process sees (CUDA_VISIBLE_DEVICES):
//   one visible GPU per rank (Slurm's --gpus-per-task=1 or --gpu-bind=single:1, any launcher
//     that sets CUDA_VISIBLE_DEVICES per rank): GPU 0, which is a different physical GPU in
//     each rank;
//   every GPU of the node visible (mpirun): GPU local_rank;
//   a listed subset of k GPUs: local_rank % k (more ranks than GPUs share them, which NCCL
//     refuses within one communicator, naming the duplicate).
inline int gpu_for_local_rank(int local_rank, int count) {
  return count > 0 ? local_rank % count : 0;
}

// "PCI 0000:1b:00.0, GPU-8c1e...": the physical GPU behind `ordinal`, as nvidia-smi names it, so
// a rank's log line can be matched to a node's GPU whatever CUDA_VISIBLE_DEVICES renumbered.
inline std::string gpu_identity(int ordinal) {
  char bus[32] = "?";
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) != cudaSuccess) cudaGetLastError();
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  char uuid[64];
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return std::string("PCI ") + bus + ", " + uuid;
}

}  // namespace trainrun::cuda
