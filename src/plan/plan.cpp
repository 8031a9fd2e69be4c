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

// distributed.tp when it divides the ranks (the config rules refuse it otherwise).
int tp_of(const Experiment& exp) {
  const int tp = std::max(1, exp.distributed.tp);
  return std::max(1, exp.world_size()) % tp == 0 ? tp : 1;
}

// The data-parallel ranks: the tensor-parallel ranks of one share its micro-batches.
int dp_of(const Experiment& exp) {
  return std::max(1, exp.world_size()) / tp_of(exp);
}

int micro_batch_of(const Experiment& exp) {
  return exp.train.micro_batch_size > 0 ? exp.train.micro_batch_size
                                        : std::max(1, exp.train.batch_size / dp_of(exp));
}

// The model measured for this run, as one rank holds it (its tensor-parallel share when
// `split`, else the whole model): bf16 on a GPU makes the activations bf16.
ModelShape measure(const Experiment& exp, bool gpu, bool split = true) {
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  return model_spec(exp.model.type)
      .measure(exp.model, micro_batch_of(exp), bf16 ? DType::bf16 : DType::f32,
               exp.train.activation_checkpointing, split ? tp_of(exp) : 1);
}

// The units ZeRO-3 gathers one at a time: the largest block's size and the two ends'.
struct UnitSizes {
  double block = 0, embed = 0, head = 0, largest = 0;
  double count = 0;
};

UnitSizes unit_sizes(const ModelShape& shape) {
  UnitSizes u;
  const std::vector<int64_t>& p = shape.unit_params;
  u.count = static_cast<double>(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const auto n = static_cast<double>(p[i]);
    u.largest = std::max(u.largest, n);
    if (i == 0)
      u.embed = n;
    else if (i + 1 == p.size())
      u.head = n;
    else
      u.block = std::max(u.block, n);
  }
  return u;
}

// What one rank holds of the training state at ZeRO stage `zero` over `shard_ranks` ranks
// (sharded_data_parallel.h for stages 2 and 3). `share`: this rank's slice of every unit, one
// element more per unit at most than an even split.
// reshard: distributed.reshard_after_forward (ZeRO-3); without it the forward's end holds every
// unit's weights.
MemoryPlan state_memory(int zero, double n, int shard_ranks, bool bf16, bool reshard,
                        const UnitSizes& u) {
  MemoryPlan m;
  const double share = n / shard_ranks + (shard_ranks > 1 ? u.count : 0);
  const double cs = bf16 ? 2 : 4;  // a compute weight's bytes
  const double bf16_copy = bf16 ? 2 : 0;
  // The working buffers of the units in use, as the pool holds them at its peak: 3 blocks
  // (the one computing, the next one its fused norm reads, the one after being prefetched;
  // in the backward one computing, one prefetched, and up to two more gradient buffers still
  // reducing), the embeddings and the head (a tied head holds the embeddings through the pass).
  // fp32 weights and gradients are one size, so they share buffers (5 block-sized at the
  // backward's peak); bf16 weights are half the size and have their own.
  const double units = 3 * u.block + u.embed + u.head;
  switch (zero) {
    case 0:
    case 1:
      m.params = (4 + bf16_copy) * n;
      m.grads = 4 * n;
      // ZeRO-1: each rank keeps the moments of its shard; shards differ by one element.
      m.optimizer = zero ? 8 * std::ceil(n / shard_ranks) : 8 * n;
      break;
    case 2:  // every weight gathered (compute dtype), the masters and gradients sharded
      m.params = cs * n + (4 + bf16_copy) * share;
      m.grads = 4 * share;
      m.optimizer = 8 * share;
      m.gathered = 4 * units;  // gradient buffers only
      break;
    default:  // 3: everything sharded, the units in use gathered
      m.params = (4 + bf16_copy) * share;
      m.grads = 4 * share;
      m.optimizer = 8 * share;
      m.gathered = !reshard ? cs * n + 4 * units
                   : bf16   ? 2 * units + 4 * units
                            : 4 * (5 * u.block + 2 * u.embed + 2 * u.head);
      break;
  }
  return m;
}

MemoryPlan memory_of(const Experiment& exp, bool gpu, const ModelShape& shape) {
  const ModelConfig& m = exp.model;
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  // The data-parallel ranks (the tensor-parallel ones hold different parts, measured in `shape`).
  const int world = dp_of(exp);
  // ZeRO shards over one replica group's ranks (dp_shard); the groups hold copies.
  const int replicas = world % std::max(1, exp.distributed.dp_replicate) == 0
                           ? std::max(1, exp.distributed.dp_replicate)
                           : 1;
  const int shard_ranks = world / replicas;
  const int micro_batch = micro_batch_of(exp);
  const double n = static_cast<double>(shape.params);
  const UnitSizes units = unit_sizes(shape);
  // Workspace. GPU: the cuBLASLt workspace (32 MiB) plus about 512 MiB for the CUDA context and
  // library handles. CPU: the host copy of weights and both moments that a checkpoint takes
  // (12 bytes per parameter of the rank's share), the token buffers, and the process itself: code,
  // oneDNN, MPI and OpenMP runtimes, measured at 50 MiB resident for the smallest run
  // (bench/RESULTS.md 23).
  const double token_buffers = 2.0 * 4 * micro_batch * m.seq_len;
  constexpr double kCpuProcess = 56.0 * 1048576;
  // The snapshot is the largest rank's: each rank snapshots its own share.
  const double snapshot = world > 1 ? 12 * std::ceil(n / world) : 12 * n;
  auto at_stage = [&](int zero) {
    MemoryPlan mem = state_memory(world > 1 || zero >= 2 ? zero : 0, n, shard_ranks, bf16,
                                  exp.distributed.reshard_after_forward || zero != 3, units);
    mem.activations = static_cast<double>(shape.activation_bytes);
    // Open MPI's in-place MPI_Reduce_scatter holds a temporary of up to the buffer reduced
    // (measured: 0, 46 and 61 MiB of a 73 MiB gradient at 2, 4 and 8 ranks), counted as
    // (world - 1) / world of it from 3 ranks on; at 2 ranks its algorithm needs none (counting
    // half the gradient there put the plan 8% above the peak, at the test's 10% edge). ZeRO-1
    // reduces the whole gradient at once, ZeRO-2/3 a unit at a time. NCCL reduces in place.
    const double reduced = zero == 1 ? n : zero >= 2 ? units.largest : 0;
    const double reduce_scatter =
        world > 1 && shard_ranks > 2 ? 4 * reduced * (shard_ranks - 1) / shard_ranks : 0;
    // Hybrid sharding: the allreduce of a shard across the replica groups holds a temporary of
    // the shard (Open MPI's ring; measured 54 MiB above the plan without it, for a 36 MiB shard).
    const double replica_allreduce = zero >= 1 && replicas > 1 ? 4 * n / shard_ranks : 0;
    mem.workspace =
        gpu ? 544.0 * 1048576
            : snapshot + token_buffers + kCpuProcess + reduce_scatter + replica_allreduce;
    mem.total =
        mem.params + mem.grads + mem.optimizer + mem.gathered + mem.activations + mem.workspace;
    return mem;
  };
  MemoryPlan mem = at_stage(exp.distributed.zero);
  for (int z = 0; z < 4; ++z) mem.total_by_zero[z] = at_stage(z).total;
  return mem;
}

double bytes_per_rank(const Experiment& exp, bool gpu) {
  return memory_of(exp, gpu, measure(exp, gpu)).total;
}

// What makes a run that does not fit fit, each change checked by computing its memory: the
// highest ZeRO stage the model takes (3, or 1 for a model without units to shard), activation
// checkpointing (selective first: it recomputes no GEMM; then full), both, and the largest
// micro-batch that fits with them; when none does, how many
// ranks per replica group that stage needs (its state shrinks with them), or that no rank count
// helps (what every rank holds whole, activations and the units in use, does not shrink).
std::string fit_advice(const Experiment& exp, bool gpu, double memory) {
  std::vector<std::string> fixes;
  auto consider = [&](const Experiment& e, const std::string& what) {
    const double need = bytes_per_rank(e, gpu);
    if (need <= memory) fixes.push_back(fmt::format("{} ({} per rank)", what, gib(need)));
  };
  const int world = dp_of(exp), tp = tp_of(exp);
  const int best_zero = exp.model.type == ModelType::mlp ? 1 : 3;
  const bool can_zero = exp.distributed.zero < best_zero && world > 1;
  const bool can_recompute = exp.train.activation_checkpointing != ActivationCheckpointing::full &&
                             exp.model.type != ModelType::mlp;
  Experiment zero = exp, selective = exp, recompute = exp, both = exp;
  selective.train.activation_checkpointing = ActivationCheckpointing::selective;
  zero.distributed.zero = both.distributed.zero = can_zero ? best_zero : exp.distributed.zero;
  if (can_recompute)
    recompute.train.activation_checkpointing = both.train.activation_checkpointing =
        ActivationCheckpointing::full;
  if (can_zero) consider(zero, fmt::format("set distributed.zero={}", best_zero));
  if (can_recompute && !recomputes(exp.train))
    consider(selective, "set train.activation_checkpointing=selective");
  if (can_recompute) consider(recompute, "set train.activation_checkpointing=full");
  if (can_zero && can_recompute)
    consider(both, fmt::format("set distributed.zero={} and train.activation_checkpointing=full",
                               best_zero));
  // The largest micro-batch that fits, with every change above that applies.
  const int per_rank = std::max(1, exp.train.batch_size / world);
  for (int micro = micro_batch_of(exp) - 1; micro >= 1; --micro) {
    if (per_rank % micro != 0) continue;
    Experiment e = both;
    e.train.micro_batch_size = micro;
    if (bytes_per_rank(e, gpu) > memory) continue;
    consider(e, fmt::format("set train.micro_batch_size={}{}", micro,
                            can_zero && can_recompute ? " with both"
                            : can_zero      ? fmt::format(" with distributed.zero={}", best_zero)
                            : can_recompute ? " with train.activation_checkpointing=full"
                                            : ""));
    break;
  }
  if (!fixes.empty()) {
    std::string out = "these fit: ";
    for (size_t i = 0; i < fixes.size(); ++i) out += (i ? "; " : "") + fixes[i];
    return out;
  }
  // Nothing above fits at this rank count: the smallest replica group that does, searched (the
  // memory falls as the group grows), with micro-batch 1 and every change above.
  Experiment one = both;
  one.train.micro_batch_size = 1;
  one.distributed.zero = best_zero;
  one.distributed.nodes = 1;
  one.distributed.dp_replicate = 1;
  const ModelShape shape = measure(one, gpu);
  auto need_at = [&](int ranks) {  // data-parallel ranks, each with the run's tp
    one.distributed.nproc = ranks * tp;
    return memory_of(one, gpu, shape).total;
  };
  const int kMaxRanks = (1 << 20) / tp;
  if (need_at(kMaxRanks) > memory)
    return fmt::format(
        "nothing fits at any rank count: activations at micro-batch 1{}, the units in use and "
        "workspace take {} on every rank however many share the rest; use a smaller model, a "
        "shorter model.seq_len or a device with more memory",
        can_recompute || recomputes(exp.train) ? " with activation checkpointing" : "",
        gib(need_at(kMaxRanks)));
  int lo = world, hi = kMaxRanks;  // lo does not fit, hi does
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (need_at(mid) <= memory ? hi : lo) = mid;
  }
  return fmt::format(
      "nothing fits at {} ranks, not even micro-batch 1 with ZeRO-{}{}; ZeRO-{} over {} ranks "
      "per replica group (distributed.nproc x distributed.nodes / distributed.dp_replicate{}) "
      "would fit",
      world * tp, best_zero, can_recompute ? " and activation checkpointing" : "", best_zero, hi,
      tp > 1 ? " / distributed.tp" : "");
}

}  // namespace

MemoryPlan plan_memory(const Experiment& exp, bool gpu) {
  return memory_of(exp, gpu, measure(exp, gpu));
}

Plan make_plan(const Experiment& exp, const DevicePeak& peak, bool advise) {
  Plan p;
  const ModelConfig& m = exp.model;
  const ModelSpec& spec = model_spec(m.type);
  const bool gpu = on_gpu(peak);
  // What one rank holds (its tensor-parallel share) and the whole model.
  const ModelShape shape = measure(exp, gpu);
  p.world = std::max(1, exp.world_size());
  p.tp = tp_of(exp);
  const ModelShape model = p.tp > 1 ? measure(exp, gpu, false) : shape;
  const int dp = dp_of(exp);  // the data-parallel ranks, over which the gradients are reduced
  if (dp % std::max(1, exp.distributed.dp_replicate) == 0)
    p.dp_replicate = std::max(1, exp.distributed.dp_replicate);
  p.dp_shard = dp / p.dp_replicate;
  p.zero = exp.distributed.zero;
  p.micro_batch = micro_batch_of(exp);
  p.accum = std::max(1, exp.train.batch_size / (p.micro_batch * dp));
  p.peak = peak;

  p.params_by_module = model.params_by_module;
  p.params = model.params;
  // The parameters one rank holds: what its data-parallel collectives and optimizer move.
  const double n = static_cast<double>(shape.params);
  const double tokens_per_step =
      static_cast<double>(targets_per_sequence(m)) * exp.train.batch_size;
  p.flops_per_token = train_flops_per_token(m);
  p.flops_per_step = p.flops_per_token * tokens_per_step;

  const MemoryPlan mem = memory_of(exp, gpu, shape);
  p.bytes_params = mem.params;
  p.bytes_grads = mem.grads;
  p.bytes_optimizer = mem.optimizer;
  p.bytes_gathered = mem.gathered;
  std::copy(std::begin(mem.total_by_zero), std::end(mem.total_by_zero), p.bytes_total_by_zero);
  p.bytes_activations = mem.activations;
  p.bytes_workspace = mem.workspace;
  p.bytes_total = mem.total;
  const int64_t largest_shard = (shape.params + dp - 1) / dp;
  const int stage = dp > 1 ? exp.distributed.zero : 0;
  const bool zero = stage != 0;
  const UnitSizes units = unit_sizes(shape);
  // The weights' bytes an all-gather moves: ZeRO-2/3 gather the compute copy (bf16 on a GPU).
  const double weight_bytes = (gpu && exp.train.precision == Precision::bf16 ? 2 : 4) * n;

  // Communication per rank per step: ring allreduce of the fp32 gradients moves 2(W-1)/W of
  // them; ZeRO-1's reduce-scatter plus all-gather moves the same. ZeRO-2 reduce-scatters the
  // gradients after each micro-batch and gathers the weights once; ZeRO-3 gathers the weights
  // twice per micro-batch (forward and backward) and reduce-scatters the gradients once.
  // ZeRO-2/3 reduce-scatter bf16 gradients with distributed.reduce_dtype: bf16.
  const double grad_bytes =
      (stage >= 2 && exp.distributed.reduce_dtype == Precision::bf16 ? 2 : 4) * n;
  const double ring = dp > 1 ? (dp - 1.0) / dp : 0;
  const double gathers = exp.distributed.reshard_after_forward ? 2 : 1;
  p.comm_bytes_per_step = stage == 3   ? ring * p.accum * (gathers * weight_bytes + grad_bytes)
                          : stage == 2 ? ring * (p.accum * grad_bytes + weight_bytes)
                                       : 2 * ring * grad_bytes;

  // Step time: on a GPU, the kernel roofline of the model's own ops (kernel_roofline.h); on the
  // CPU, compute at the measured sgemm peak (or its memory traffic, whichever is slower). Plus
  // the communication that backward cannot hide, plus the optimizer.
  const double flops_per_rank = p.flops_per_step / p.world;
  // Under tensor parallelism a rank computes 1/tp of every GEMM (the blocks' and, vocabulary-
  // parallel, the head's): its share of a data-parallel rank's work.
  const double tp_work = 1.0 / p.tp;
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
    tally(sk.micro_batch, p.accum * tp_work, &busy);
    // ZeRO-1: each rank updates only its shard.
    tally(sk.optimizer, 1.0, &optimizer_kernels);
    std::sort(p.kernels.begin(), p.kernels.end(),
              [](const Plan::Kernels& a, const Plan::Kernels& b) { return a.seconds > b.seconds; });
  } else {
    const double compute = p.flops_per_step / dp * tp_work / std::max(peak.flops, 1.0);
    // Each activation byte is written once and read about twice (forward, backward).
    const double traffic = 3 * p.bytes_activations * p.accum / std::max(peak.mem_bw, 1.0);
    busy = std::max(compute, traffic);
  }
  // The collectives (collectives.h): one allreduce per gradient bucket, or ZeRO-1's
  // reduce-scatter and all-gather of the whole gradient.
  const int unit_count = std::max(1, static_cast<int>(units.count));
  p.buckets = stage >= 2 ? unit_count
              : zero     ? 1
                         : static_cast<int>((p.params + kGradBucketElems - 1) / kGradBucketElems);
  // A reduce-scatter or all-gather of `bytes`, one collective per unit, `times` over.
  auto halves = [&](double bytes, int world, double times, CollectiveTime* sum) {
    const CollectiveTime t = half_allreduce_time(bytes, world, unit_count, peak.net);
    sum->seconds += times * t.seconds;
    sum->bandwidth_seconds += times * t.bandwidth_seconds;
    sum->latency_seconds += times * t.latency_seconds;
    sum->algorithm = t.algorithm;
    sum->link = t.link;
  };
  auto collectives = [&](int world) {
    if (!zero) return allreduce_time(grad_bytes, world, p.buckets, peak.net);
    CollectiveTime t;
    if (stage == 1) {
      t = half_allreduce_time(grad_bytes, world, 1, peak.net);
      t.seconds *= 2, t.bandwidth_seconds *= 2, t.latency_seconds *= 2;
    } else {
      halves(grad_bytes, world, p.accum, &t);
      // ZeRO-3 gathers each unit for its forward, and again for its backward unless the
      // forward's weights are kept (distributed.reshard_after_forward: false).
      const double gathers = exp.distributed.reshard_after_forward ? 2.0 : 1.0;
      halves(weight_bytes, world, stage == 3 ? gathers * p.accum : 1.0, &t);
    }
    return t;
  };
  // Gradient buckets go out during backward (2/3 of compute), except those final only at its
  // end (all of them for a model that reports none earlier); ZeRO-1's come after it. ZeRO-2's
  // reduce-scatters run behind each backward, its all-gather after the update. ZeRO-3's
  // collectives all run behind the compute (prefetched gathers, reduce-scatters behind the
  // backward) except each pass's first gather, of the embeddings and of the head.
  const double last = static_cast<double>(shape.last_ready_params) / n;
  auto exposed_of = [&](double comm, int world) {
    if (stage == 1) return comm;
    if (stage == 2) {
      CollectiveTime gather;
      halves(weight_bytes, world, 1.0, &gather);
      return gather.seconds + std::max(0.0, comm - gather.seconds - busy * 2.0 / 3.0);
    }
    if (stage == 3) {
      CollectiveTime first;
      halves(weight_bytes * (units.embed + units.head) / std::max(n, 1.0), world,
             static_cast<double>(p.accum), &first);
      return std::max(first.seconds, comm - busy);
    }
    return std::max(comm * last, comm - busy * 2.0 / 3.0 / p.accum);
  };
  p.collectives = collectives(dp);
  p.allreduce_seconds_per_step = p.collectives.seconds;
  p.allreduce_exposed_seconds_per_step = exposed_of(p.collectives.seconds, dp);
  for (const int w : {8, 64, 512, 4096}) {
    const CollectiveTime t = collectives(w);
    p.at_scale.push_back({w, t, exposed_of(t.seconds, w)});
  }
  // Tensor parallelism's all-reduces (linear.h): per block and micro-batch, the row-parallel
  // outputs of attention and the MLP in forward, the column-parallel input gradients in backward,
  // and the forward's again when full checkpointing recomputes it; and the vocabulary-parallel
  // embedding's output and the head's input gradient once; each of the micro-batch's rows x
  // d_model activations. And the vocabulary-parallel loss's one (classifier_loss.h): the
  // (tp + 1) x rows float statistics, small, a latency more than bytes. They sit between the ops
  // that need them, except the column-parallel layers' backward ones (q|k|v's and the MLP's
  // first in each block, and the head's), which run during the layer's weight-gradient GEMM
  // (distributed.tp_overlap) on a GPU: each hides up to that GEMM's time, a rank's 1/tp share
  // of 2 x rows x d_model x its outputs. Over MPI the collective progresses only at the wait,
  // so nothing is hidden on the CPU (bench/RESULTS.md 47).
  if (p.tp > 1) {
    const double act_bytes = gpu && exp.train.precision == Precision::bf16 ? 2 : 4;
    const double rows = static_cast<double>(p.micro_batch) * m.seq_len;
    const bool full = exp.train.activation_checkpointing == ActivationCheckpointing::full;
    p.tp_allreduces_per_micro_batch = m.n_layer * (full ? 6 : 4) + 2;
    p.tp_allreduce_bytes = rows * m.d_model * act_bytes;
    p.tp_loss_allreduce_bytes = (p.tp + 1) * rows * 4;
    const CollectiveTime one = allreduce_time(p.tp_allreduce_bytes, p.tp, 1, peak.net);
    const CollectiveTime loss = allreduce_time(p.tp_loss_allreduce_bytes, p.tp, 1, peak.net);
    p.tp_collective = one;
    const double count = static_cast<double>(p.tp_allreduces_per_micro_batch) * p.accum;
    p.tp_seconds_per_step = one.seconds * count + loss.seconds * p.accum;
    p.tp_exposed_seconds_per_step = p.tp_seconds_per_step;
    if (gpu && exp.distributed.tp_overlap != TpOverlap::off) {
      auto hidden = [&](double outputs) {
        const double wgrad = 2 * rows * m.d_model * outputs / p.tp / std::max(peak.flops, 1.0);
        return std::min(one.seconds, wgrad);
      };
      double per_block = 0;
      for (const double outputs : spec.column_parallel_outputs(m)) per_block += hidden(outputs);
      p.tp_exposed_seconds_per_step -=
          (per_block * m.n_layer + hidden(m.vocab_size)) * p.accum;  // and the head's
    }
    p.tp_bytes_per_step = 2.0 * (p.tp - 1) / p.tp *
                          (p.tp_allreduce_bytes * count + p.tp_loss_allreduce_bytes * p.accum);
  }
  const double exposed = p.allreduce_exposed_seconds_per_step + p.tp_exposed_seconds_per_step;
  const double shard = zero ? static_cast<double>(largest_shard) : n;
  // AdamW reads weight, grad, m, v and writes weight, m, v: 28 bytes per parameter (on a GPU
  // the optimizer's kernels, ZeRO's over its shard).
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
    p.warnings.push_back(fmt::format("needs {} per rank but {} has {}{}", gib(p.bytes_total),
                                     peak.name, gib(peak.memory),
                                     advise ? ": " + fit_advice(exp, gpu, peak.memory) : ""));
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
