// The kernels of one training micro-batch and their roofline times on a GPU (`trainrun plan`'s
// step time for a GPU, docs/observability.md "Kernel roofline"). The kernel list is the model's
// own: the model is built on a backend that records every op it is asked for (with its tensors'
// shapes) instead of computing it, and runs forward and backward once, so the list can never
// drift from what a run launches. Each op's FLOPs and bytes follow from its shapes; its time is
//   max(flops / (efficiency x peak FLOP/s), bytes / (0.8 x memory bandwidth)) + 2 us
// with efficiency 0.8 for GEMMs and 0.4 for attention (the reasons are beside the constants).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/backend/backend.h"
#include "trainrun/core/experiment.h"

namespace trainrun {

struct DevicePeak;

struct KernelCost {
  Op op;
  double flops = 0;  // the arithmetic the kernel does (causal attention: half the square)
  double bytes = 0;  // every tensor it takes moved once
};

// The ops of one micro-batch of `batch` sequences (forward, backward) in launch order, then the
// optimizer's (gradient norm, AdamW, the bf16 weight copy) once.
struct StepKernels {
  std::vector<KernelCost> micro_batch;
  std::vector<KernelCost> optimizer;
};
StepKernels step_kernels(const Experiment& exp, int batch);

// Seconds on `peak` by the formula above.
double roofline_seconds(const KernelCost& k, const DevicePeak& peak);

}  // namespace trainrun
