// Plan: what a run will cost before it runs: parameters per module, FLOPs, memory per rank,
// communication per step, a predicted step time, from the same FLOPs model as the MFU
// (flops.h), and what checkpointing costs at the configured interval. `trainrun plan` prints it;
// `trainrun CONFIG` refuses a run that cannot fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/plan/collectives.h"

namespace trainrun {

struct DevicePeak {
  std::string name;    // "cpu (measured sgemm)", "H100 SXM", ...
  double flops = 0;    // FLOP/s for this run's precision, per rank
  double mem_bw = 0;   // bytes/s
  double memory = 0;   // bytes available per rank
  double link_bw = 0;  // bytes/s per rank for this run's collectives (the link below they use)
  Interconnect net;    // within a node and between nodes (collectives.h)
  std::string source;  // "measured now" or "table"
  // Checkpoints. host_bw: bytes/s of the snapshot copy into host memory (CPU: memcpy, GPU: PCIe).
  // disk_bw: bytes/s one rank writes a checkpoint file at (an assumption unless --disk-bw).
  double host_bw = 0;
  double disk_bw = 0;
  std::string disk_source;  // where disk_bw came from, with how to measure it
};

// One checkpoint save, for the rank that takes longest (the one writing the largest share).
struct CheckpointPlan {
  int64_t every = 0;  // checkpoint.every; 0 = only at the end
  bool async = false;
  int files = 1;                // files written per save: one per rank, and MANIFEST
  double state_bytes = 0;       // weights + AdamW m + v of the whole model: 12 bytes per parameter
  double file_overhead = 0;     // HDF5 headers, /config, /metadata per file
  double bytes_per_rank = 0;    // what the slowest rank writes, its file's overhead included
  double copy_seconds = 0;      // snapshot into host memory (blocks the step loop)
  double write_seconds = 0;     // bytes_per_rank at disk_bw
  double blocking_seconds = 0;  // the step loop waits this long per save
  double background_seconds = 0;  // async: the write, off the step loop; sync: 0
  double fraction = 0;  // blocking_seconds / (every x predicted step time); 0 when every is 0
  int64_t every_for_5pct = 0;  // the smallest checkpoint.every that keeps fraction <= 5%
};

struct Plan {
  int world = 1;
  int dp_replicate = 1, dp_shard = 1;  // the device mesh (device_mesh.h)
  int tp = 1;                          // distributed.tp, its innermost axis
  int zero = 0;                        // distributed.zero
  int micro_batch = 1, accum = 1;
  std::vector<std::pair<std::string, int64_t>> params_by_module;  // "wte", "blocks.0", ...
  int64_t params = 0;
  double flops_per_token = 0, flops_per_step = 0;
  // Memory per rank at the configured ZeRO stage (MemoryPlan).
  double bytes_params = 0, bytes_grads = 0, bytes_optimizer = 0, bytes_gathered = 0;
  double bytes_activations = 0;  // per micro-batch, as the model's arena allocates it
  double bytes_workspace = 0;
  double bytes_total = 0;
  double bytes_total_by_zero[4] = {};  // at each ZeRO stage, everything else as configured
  double comm_bytes_per_step = 0;
  double allreduce_seconds_per_step = 0;          // the collectives' time (collectives.h)
  double allreduce_exposed_seconds_per_step = 0;  // of it, what backward does not hide
  int buckets =
      1;  // collectives per step: gradient buckets (ZeRO-1: 1 reduce-scatter + all-gather)
  CollectiveTime collectives;  // this run's, with its algorithm and terms
  // Tensor parallelism: all-reduces of activations inside every block (none when tp is 1), the
  // bytes of each, one's time, the loss's one all-reduce per micro-batch and its bytes, and
  // their total per step, the loss's included (all exposed: no overlap yet).
  int tp_allreduces_per_micro_batch = 0;
  double tp_allreduce_bytes = 0, tp_loss_allreduce_bytes = 0, tp_bytes_per_step = 0,
         tp_seconds_per_step = 0,
         tp_exposed_seconds_per_step = 0;  // less what runs during weight-gradient GEMMs
  CollectiveTime tp_collective;
  // The same gradients at other world sizes (8, 64, 512, 4096 ranks, ranks_per_node a node),
  // each rank keeping this run's micro-batch: the collectives' time and what is exposed.
  struct AtScale {
    int world;
    CollectiveTime t;
    double exposed;
  };
  std::vector<AtScale> at_scale;
  double predicted_step_seconds = 0, predicted_tokens_per_second = 0;
  // On a GPU: the kernel roofline (src/plan/kernel_roofline.h) behind the step time, per op
  // over one step (every micro-batch and the optimizer), slowest first; and the MFU it implies
  // (flops_per_step over the world's peak for the predicted step time).
  struct Kernels {
    std::string op;
    int64_t launches = 0;
    double flops = 0, bytes = 0, seconds = 0;
  };
  std::vector<Kernels> kernels;
  double predicted_mfu = 0;
  DevicePeak peak;
  CheckpointPlan checkpoint;
  std::vector<std::string> warnings;
  bool fits = true;
};

// Bytes per rank, from the config alone: no device is measured, so it is cheap enough to check
// before every run. make_plan's memory figures are these.
struct MemoryPlan {
  // What one rank holds at the configured ZeRO stage over its dp_shard group: weights (fp32
  // masters and the bf16 compute copy, whole or this rank's shard), gradients, AdamW moments,
  // and under ZeRO-2/3 the units' working buffers (gathered weights of the units in use and
  // prefetched, gradient buffers until reduced).
  double params = 0, grads = 0, optimizer = 0, gathered = 0;
  double activations = 0;  // per micro-batch
  double workspace = 0;
  double total = 0;
  double total_by_zero[4] = {};  // the same run at ZeRO stage 0, 1, 2, 3
};
// gpu: sized for a GPU (bf16 weight copy and activations when train.precision is bf16, CUDA
// context workspace) rather than the CPU (host checkpoint copy).
MemoryPlan plan_memory(const Experiment& exp, bool gpu);

// `trainrun plan --link-bw/--link-latency`: the link this run's collectives cross (between
// nodes when multi_node, else within the node) measured instead of assumed; bw <= 0 and
// latency < 0 keep what the table or the assumption says.
void set_link(DevicePeak& peak, bool multi_node, double bw, double latency);

// The peak for the configured device: CPU measures sgemm now; GPUs come from a table
// (A100, H100, H200; `gpu` names one, empty = H100). The checkpoint write rate is an assumption
// (device_peaks.cpp says why): `trainrun plan --disk-bw` replaces it.
DevicePeak device_peak(const Experiment& exp, const std::string& gpu = "");
// advise: a run that does not fit says what would (a search of its own: layout_search.h skips it).
Plan make_plan(const Experiment& exp, const DevicePeak& peak, bool advise = true);
// MemAvailable of this machine (/proc/meminfo), bytes.
double mem_available_bytes();
std::string plan_text(const Plan& plan);
std::string plan_json(const Plan& plan);

}  // namespace trainrun
