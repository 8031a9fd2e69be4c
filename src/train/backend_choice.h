// Which backend a run trains on, from the config's `device` and what this machine has, and
// whether it can run the configured precision. Decided before anything is allocated, so a run
// that cannot go ahead says why (and how to fix it) before it costs anything.
#pragma once

#include <memory>

#include "trainrun/backend/backend.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

// device: cpu -> the CPU backend; cuda -> the CUDA backend of GPU `local_rank`, or DeviceError
// saying why CUDA is not usable; auto -> CUDA where usable, else the CPU (logged).
std::unique_ptr<Backend> choose_backend(const Experiment& exp, int local_rank);

// train.precision=bf16 asks of the backend (docs/cuda.md, "bf16 mixed precision"): every op the
// models run on bf16 activations (AdamW and the gradient norm run on the f32 masters), the cast
// that refreshes the compute copy, and f32 parameter gradients beside bf16 activations. Throws
// ConfigError listing everything missing.
void require_bf16(const Backend& be);

// Collective: the communicator for device tensors: on CUDA with several ranks, NCCL (its id sent
// over `host` from rank 0); null where `host` itself moves them (the CPU, or one rank).
std::unique_ptr<Communicator> make_device_communicator(const Backend& be, Communicator& host);

}  // namespace trainrun
