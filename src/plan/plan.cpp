// make_plan: the cost of a run from its config alone. Parameters and activation memory come
// from the model's own measuring pass (model_spec.h), so the plan and the run agree exactly;
// FLOPs from the shared FLOPs model (flops.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernel_roofline.h"
#include "trainrun/comm/comm.h"
#include "trainrun/core/shard.h"
#include "trainrun/model/flops.h"
#include "trainrun/model/model_spec.h"
#include "trainrun/plan/plan.h"

namespace trainrun {

namespace {

constexpr double kGiB = 1073741824.0;

bool on_gpu(const DevicePeak& p) {
  return p.name.rfind("cpu", 0) != 0;
}

std::string gib(double b) {
  return fmt::format("{:.2f} GiB", b / kGiB);
}

std::string mib(double b) {
  return fmt::format("{:.1f} MiB", b / 1048576.0);
}

std::string secs(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

// What a checkpoint file holds besides the flat state: HDF5's superblock and object headers (one
// per dataset, each with its `offset` attribute), the fixed-array chunk indices and fletcher32
// sums, /config and /metadata (docs/checkpoint-format.md). Measured on our files: 66 KB for 52
// tensors, 90 KB for 76, about 1 KB per tensor (three datasets) and 17 KB fixed, so GPT-2 small's
// 148 tensors come to about 160 KB. 256 KiB rounds that up; a shard file holds three datasets,
// fewer. Beside a state of megabytes it hardly matters; it keeps a tiny model's write above zero.
constexpr double kCheckpointFileOverhead = 256.0 * 1024;
constexpr double kCheckpointBudget = 0.05;  // the share of training time that earns a warning

// One save at interval `every` (0 = at the end only) for the rank that takes longest. Writes of
// different ranks do not contend (DevicePeak::disk_bw says why).
CheckpointPlan checkpoint_of(const Experiment& exp, const DevicePeak& peak, int64_t params,
                             int world, double step_seconds) {
  CheckpointPlan c;
  c.every = exp.checkpoint.every;
  c.async = exp.checkpoint.async;
  // Weights and both AdamW moments, fp32: 12 bytes per parameter (the flat buffers' alignment
  // padding, a few bytes per tensor, is left out).
  constexpr double kBytesPerParam = 12;
  c.state_bytes = kBytesPerParam * static_cast<double>(params);
  c.file_overhead = kCheckpointFileOverhead;
  // Each rank writes its shard_of range of all three buffers (nothing is gathered); the largest
  // one sets the pace.
  int64_t largest = 0;
  for (int r = 0; r < world; ++r) largest = std::max(largest, shard_split(params, world, r).size());
  c.files = world + 1;  // the rank files and rank 0's MANIFEST (within the overhead)
  c.bytes_per_rank = kBytesPerParam * static_cast<double>(largest) + c.file_overhead;
  c.copy_seconds = (c.bytes_per_rank - c.file_overhead) / std::max(peak.host_bw, 1.0);
  c.write_seconds = c.bytes_per_rank / std::max(peak.disk_bw, 1.0);
  // The snapshot (the copy) always holds up the step loop. Synchronous saves then write;
  // asynchronous ones hand the write to a background thread, which must be done with the last
  // save before it takes the next: a write longer than the interval stalls the loop too.
  const double snapshot = c.copy_seconds;
  auto blocking = [&](int64_t every) {
    if (!c.async) return snapshot + c.write_seconds;
    const double interval = every > 0 ? static_cast<double>(every) * step_seconds : 0;
    return snapshot + std::max(0.0, c.write_seconds - interval);
  };
  auto share = [&](int64_t every) {
    return blocking(every) / (static_cast<double>(every) * std::max(step_seconds, 1e-12));
  };
  c.blocking_seconds = blocking(c.every);
  c.background_seconds = c.async ? c.write_seconds : 0;
  c.fraction = c.every > 0 ? share(c.every) : 0;
  // Smallest interval under the budget: the sync cost is fixed, so solve; the async stall only
  // shrinks as the interval grows, so step up from the solution of its snapshot part.
  const double steps = std::max(snapshot + (c.async ? 0.0 : c.write_seconds), 0.0) /
                       (kCheckpointBudget * std::max(step_seconds, 1e-12));
  constexpr double kMaxEvery = 1e15;
  int64_t every = static_cast<int64_t>(std::ceil(std::min(std::max(steps, 1.0), kMaxEvery)));
  if (c.async && c.write_seconds > 0)
    every = std::max(every, static_cast<int64_t>(std::ceil(std::min(
                                c.write_seconds / std::max(step_seconds, 1e-12), kMaxEvery))));
  for (int i = 0; i < 4 && share(every) > kCheckpointBudget; ++i) ++every;  // rounding
  c.every_for_5pct = every;
  return c;
}

int micro_batch_of(const Experiment& exp) {
  return exp.train.micro_batch_size > 0
             ? exp.train.micro_batch_size
             : std::max(1, exp.train.batch_size / std::max(1, exp.world_size()));
}

// The model measured for this run: bf16 on a GPU makes the activations bf16.
ModelShape measure(const Experiment& exp, bool gpu) {
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  return model_spec(exp.model.type)
      .measure(exp.model, micro_batch_of(exp), bf16 ? DType::bf16 : DType::f32,
               recomputes(exp.train));
}

MemoryPlan memory_of(const Experiment& exp, bool gpu, const ModelShape& shape) {
  MemoryPlan mem;
  const ModelConfig& m = exp.model;
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  const int world = std::max(1, exp.world_size());
  // ZeRO shards over one replica group's ranks (dp_shard); the groups hold copies.
  const int replicas = world % std::max(1, exp.distributed.dp_replicate) == 0
                           ? std::max(1, exp.distributed.dp_replicate)
                           : 1;
  const int shard_ranks = world / replicas;
  const int micro_batch = micro_batch_of(exp);
  const int64_t params = shape.params;
  const double n = static_cast<double>(params);
  // fp32 master weights, gradients and both AdamW moments (4 bytes each); bf16 on a GPU adds a
  // bf16 copy of the weights, and the activations are bf16.
  mem.params = 4 * n + (bf16 ? 2 * n : 0);
  mem.grads = 4 * n;
  mem.optimizer = 8 * n;
  // ZeRO-1: each rank keeps the moments of its shard; shards differ by at most one element.
  mem.optimizer_zero1 = 8 * static_cast<double>((params + shard_ranks - 1) / shard_ranks);
  mem.activations = static_cast<double>(shape.activation_bytes);
  // Workspace. GPU: the cuBLASLt workspace (32 MiB) plus about 512 MiB for the CUDA context and
  // library handles. CPU: the host copy of weights and both moments that a checkpoint takes
  // (12 bytes per parameter of the rank's share), the token buffers, and the process itself: code,
  // oneDNN, MPI and OpenMP runtimes, measured at 50 MiB resident for the smallest run
  // (bench/RESULTS.md 23).
  const double token_buffers = 2.0 * 4 * micro_batch * m.seq_len;
  constexpr double kCpuProcess = 56.0 * 1048576;
  // The snapshot is the largest rank's: each rank snapshots its own shard_of share.
  const double snapshot =
      world > 1 ? 12 * static_cast<double>((params + world - 1) / world) : 12 * n;
  const bool zero = exp.distributed.zero != 0 && world > 1;
  // ZeRO-1 over MPI: Open MPI's in-place MPI_Reduce_scatter holds a temporary of up to the whole
  // gradient (measured: 0, 46 and 61 MiB of a 73 MiB gradient at 2, 4 and 8 ranks), counted as
  // (world - 1) / world of it from 3 ranks on; at 2 ranks its algorithm needs none (counting
  // half the gradient there put the plan 8% above the peak, at the test's 10% edge). NCCL
  // reduces in place.
  const double reduce_scatter =
      zero && shard_ranks > 2 ? 4 * n * (shard_ranks - 1) / shard_ranks : 0;
  // Hybrid sharding: the allreduce of a shard across the replica groups holds a temporary of
  // the shard (Open MPI's ring; measured 54 MiB above the plan without it, for a 36 MiB shard).
  const double replica_allreduce = zero && replicas > 1 ? 4 * n / shard_ranks : 0;
  mem.workspace = gpu ? 544.0 * 1048576
                      : snapshot + token_buffers + kCpuProcess + reduce_scatter + replica_allreduce;
  mem.total = mem.params + mem.grads + (zero ? mem.optimizer_zero1 : mem.optimizer) +
              mem.activations + mem.workspace;
  return mem;
}

double bytes_per_rank(const Experiment& exp, bool gpu) {
  return memory_of(exp, gpu, measure(exp, gpu)).total;
}

// What makes a run that does not fit fit, each change checked by computing its memory: ZeRO-1,
// activation checkpointing, both, and the largest micro-batch that fits with them; when none
// does, how many ranks ZeRO-1 would need, or that no rank count helps (what every rank holds
// whole does not shrink with more of them).
std::string fit_advice(const Experiment& exp, bool gpu, double memory) {
  std::vector<std::string> fixes;
  auto consider = [&](const Experiment& e, const std::string& what) {
    const double need = bytes_per_rank(e, gpu);
    if (need <= memory) fixes.push_back(fmt::format("{} ({} per rank)", what, gib(need)));
  };
  const int world = std::max(1, exp.world_size());
  const bool can_zero = exp.distributed.zero == 0 && world > 1;
  const bool can_recompute = !recomputes(exp.train) && exp.model.type != ModelType::mlp;
  Experiment zero = exp, recompute = exp, both = exp;
  zero.distributed.zero = both.distributed.zero = can_zero ? 1 : exp.distributed.zero;
  if (can_recompute)
    recompute.train.activation_checkpointing = both.train.activation_checkpointing =
        ActivationCheckpointing::full;
  if (can_zero) consider(zero, "set distributed.zero=1");
  if (can_recompute) consider(recompute, "set train.activation_checkpointing=full");
  if (can_zero && can_recompute) consider(both, "set both");
  // The largest micro-batch that fits, with every change above that applies.
  const int per_rank = std::max(1, exp.train.batch_size / world);
  for (int micro = micro_batch_of(exp) - 1; micro >= 1; --micro) {
    if (per_rank % micro != 0) continue;
    Experiment e = both;
    e.train.micro_batch_size = micro;
    if (bytes_per_rank(e, gpu) > memory) continue;
    consider(e, fmt::format("set train.micro_batch_size={}{}", micro,
                            can_zero || can_recompute ? " with both" : ""));
    break;
  }
  if (!fixes.empty()) {
    std::string out = "these fit: ";
    for (size_t i = 0; i < fixes.size(); ++i) out += (i ? "; " : "") + fixes[i];
    return out;
  }
  // Nothing above fits. ZeRO-1 divides only the AdamW moments, by a replica group's ranks.
  Experiment one = both;
  one.train.micro_batch_size = 1;
  one.distributed.zero = 1;
  const ModelShape shape = measure(one, gpu);
  const MemoryPlan m = memory_of(one, gpu, shape);
  const double replicated = m.total - m.optimizer_zero1;
  if (replicated < memory) {
    const double ranks = std::ceil(8.0 * static_cast<double>(shape.params) / (memory - replicated));
    return fmt::format(
        "nothing fits at {} ranks, not even micro-batch 1 with ZeRO-1 and activation "
        "checkpointing; ZeRO-1 over {:.0f} ranks per replica group (distributed.nproc x "
        "distributed.nodes / distributed.dp_replicate) would fit",
        world, std::max(ranks, 2.0));
  }
  return fmt::format(
      "nothing fits at any rank count: parameters, gradients, activations at micro-batch 1 and "
      "workspace take {} on every rank whatever their number (sharding parameters and "
      "gradients, ZeRO-3, is not implemented yet); use a smaller model or a device with more "
      "memory",
      gib(replicated));
}

}  // namespace

MemoryPlan plan_memory(const Experiment& exp, bool gpu) {
  return memory_of(exp, gpu, measure(exp, gpu));
}

Plan make_plan(const Experiment& exp, const DevicePeak& peak) {
  Plan p;
  const ModelConfig& m = exp.model;
  const ModelSpec& spec = model_spec(m.type);
  const bool gpu = on_gpu(peak);
  const ModelShape shape = measure(exp, gpu);
  p.world = std::max(1, exp.world_size());
  if (p.world % std::max(1, exp.distributed.dp_replicate) == 0)
    p.dp_replicate = std::max(1, exp.distributed.dp_replicate);
  p.dp_shard = p.world / p.dp_replicate;
  p.micro_batch = micro_batch_of(exp);
  p.accum = std::max(1, exp.train.batch_size / (p.micro_batch * p.world));
  p.peak = peak;

  p.params_by_module = shape.params_by_module;
  p.params = shape.params;
  const double n = static_cast<double>(p.params);
  const double tokens_per_step =
      static_cast<double>(targets_per_sequence(m)) * exp.train.batch_size;
  p.flops_per_token = train_flops_per_token(m);
  p.flops_per_step = p.flops_per_token * tokens_per_step;

  const MemoryPlan mem = memory_of(exp, gpu, shape);
  p.bytes_params = mem.params;
  p.bytes_grads = mem.grads;
  p.bytes_optimizer = mem.optimizer;
  p.bytes_optimizer_zero1 = mem.optimizer_zero1;
  p.bytes_activations = mem.activations;
  p.bytes_workspace = mem.workspace;
  p.bytes_total = mem.total;
  const int64_t largest_shard = (p.params + p.world - 1) / p.world;
  const bool zero = exp.distributed.zero != 0 && p.world > 1;

  // Communication per rank per step: ring allreduce of the fp32 gradients moves 2(W-1)/W of
  // them; ZeRO-1's reduce-scatter plus all-gather moves the same.
  const double grad_bytes = 4 * n;
  p.comm_bytes_per_step = p.world > 1 ? 2.0 * (p.world - 1) / p.world * grad_bytes : 0;

  // Step time: on a GPU, the kernel roofline of the model's own ops (kernel_roofline.h); on the
  // CPU, compute at the measured sgemm peak (or its memory traffic, whichever is slower). Plus
  // the communication that backward cannot hide, plus the optimizer.
  const double flops_per_rank = p.flops_per_step / p.world;
  double busy = 0, optimizer_kernels = 0;
  if (gpu) {
    const StepKernels sk = step_kernels(exp, p.micro_batch);
    auto tally = [&](const std::vector<KernelCost>& ks, double times, double* total) {
      for (const KernelCost& k : ks) {
        const std::string name = op_name(k.op);
        auto it = std::find_if(p.kernels.begin(), p.kernels.end(),
                               [&](const Plan::Kernels& e) { return e.op == name; });
        if (it == p.kernels.end()) it = p.kernels.insert(p.kernels.end(), {name});
        const double s = roofline_seconds(k, peak) * times;
        it->launches += static_cast<int64_t>(times);
        it->flops += k.flops * times;
        it->bytes += k.bytes * times;
        it->seconds += s;
        *total += s;
      }
    };
    tally(sk.micro_batch, p.accum, &busy);
    // ZeRO-1: each rank updates only its shard.
    tally(sk.optimizer, 1.0, &optimizer_kernels);
    std::sort(p.kernels.begin(), p.kernels.end(),
              [](const Plan::Kernels& a, const Plan::Kernels& b) { return a.seconds > b.seconds; });
  } else {
    const double compute = flops_per_rank / std::max(peak.flops, 1.0);
    // Each activation byte is written once and read about twice (forward, backward).
    const double traffic = 3 * p.bytes_activations * p.accum / std::max(peak.mem_bw, 1.0);
    busy = std::max(compute, traffic);
  }
  // The collectives (collectives.h): one allreduce per gradient bucket, or ZeRO-1's
  // reduce-scatter and all-gather of the whole gradient.
  p.buckets = zero ? 1 : static_cast<int>((p.params + kGradBucketElems - 1) / kGradBucketElems);
  auto collectives = [&](int world) {
    if (!zero) return allreduce_time(grad_bytes, world, p.buckets, peak.net);
    CollectiveTime t = half_allreduce_time(grad_bytes, world, 1, peak.net);
    t.seconds *= 2, t.bandwidth_seconds *= 2, t.latency_seconds *= 2;
    return t;
  };
  // Gradient buckets go out during backward (2/3 of compute), except those final only at its
  // end (all of them for a model that reports none earlier); ZeRO-1's come after it.
  const double last = static_cast<double>(shape.last_ready_params) / n;
  auto exposed_of = [&](double comm) {
    return zero ? comm : std::max(comm * last, comm - busy * 2.0 / 3.0 / p.accum);
  };
  p.collectives = collectives(p.world);
  p.allreduce_seconds_per_step = p.collectives.seconds;
  p.allreduce_exposed_seconds_per_step = exposed_of(p.collectives.seconds);
  for (const int w : {8, 64, 512, 4096}) {
    const CollectiveTime t = collectives(w);
    p.at_scale.push_back({w, t, exposed_of(t.seconds)});
  }
  const double exposed = p.allreduce_exposed_seconds_per_step;
  const double shard = zero ? static_cast<double>(largest_shard) : n;
  // AdamW reads weight, grad, m, v and writes weight, m, v: 28 bytes per parameter (on a GPU
  // the optimizer's kernels, ZeRO-1's over its shard).
  const double optimizer =
      gpu ? optimizer_kernels * shard / n : 28 * shard / std::max(peak.mem_bw, 1.0);
  p.predicted_step_seconds = busy + exposed + optimizer;
  p.predicted_mfu = flops_per_rank / (p.predicted_step_seconds * std::max(peak.flops, 1.0));
  p.predicted_tokens_per_second = tokens_per_step / p.predicted_step_seconds;
  p.checkpoint = checkpoint_of(exp, peak, p.params, p.world, p.predicted_step_seconds);

  // Warnings that name the fix.
  if (m.vocab_size % 64 != 0) {
    const int64_t padded = (int64_t{m.vocab_size} + 63) / 64 * 64;
    p.warnings.push_back(
        fmt::format("model.vocab_size {} is not a multiple of 64: pad to {} for faster GEMMs",
                    m.vocab_size, padded));
  }
  spec.advise(m, gpu, p.warnings);
  const int64_t micro_tokens = targets_per_sequence(m) * p.micro_batch;
  if (gpu && micro_tokens < 4096)
    p.warnings.push_back(
        fmt::format("a micro-batch is {} tokens: under 4096 a GPU is mostly idle; raise "
                    "train.micro_batch_size (or train.batch_size)",
                    micro_tokens));
  if (p.bytes_total > peak.memory) {
    p.fits = false;
    p.warnings.push_back(fmt::format("needs {} per rank but {} has {}: {}", gib(p.bytes_total),
                                     peak.name, gib(peak.memory),
                                     fit_advice(exp, gpu, peak.memory)));
  }
  const CheckpointPlan& c = p.checkpoint;
  if (c.every > 0 && c.fraction > kCheckpointBudget) {
    std::string fixes = fmt::format("raise checkpoint.every to {}", c.every_for_5pct);
    if (!c.async) fixes += ", set checkpoint.async: true (the loop then waits only for the copy)";
    const double snapshot = c.copy_seconds;
    const std::string what =
        !c.async
            ? fmt::format("writing {} per rank at {:g} MB/s", mib(c.bytes_per_rank),
                          peak.disk_bw / 1e6)
            : fmt::format("copying {} into host memory{}", mib(c.bytes_per_rank - c.file_overhead),
                          c.blocking_seconds > snapshot
                              ? fmt::format(", then waiting for the last save's background "
                                            "write ({} at {:g} MB/s)",
                                            secs(c.write_seconds), peak.disk_bw / 1e6)
                              : "");
    p.warnings.push_back(fmt::format(
        "checkpointing takes {:.1f}% of training time: each save blocks the step loop {} ({}) "
        "every {} step{} of {}: over {:.0f}%, so {}",
        100 * c.fraction, secs(c.blocking_seconds), what, c.every, c.every == 1 ? "" : "s",
        secs(p.predicted_step_seconds), 100 * kCheckpointBudget, fixes));
  }
  return p;
}

}  // namespace trainrun
