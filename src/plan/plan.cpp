// make_plan: the cost of a run from its config alone. Parameters and activation memory come
// from the model's own measuring pass (model_spec.h), so the plan and the run agree exactly;
// FLOPs from the shared FLOPs model (flops.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainrun/flops.h"
#include "trainrun/model_spec.h"
#include "trainrun/plan.h"

namespace trainrun {

namespace {

constexpr double kGiB = 1073741824.0;

bool on_gpu(const DevicePeak& p) {
  return p.name.rfind("cpu", 0) != 0;
}

std::string gib(double b) {
  return fmt::format("{:.2f} GiB", b / kGiB);
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
      .measure(exp.model, micro_batch_of(exp), bf16 ? DType::bf16 : DType::f32);
}

MemoryPlan memory_of(const Experiment& exp, bool gpu, const ModelShape& shape) {
  MemoryPlan mem;
  const ModelConfig& m = exp.model;
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  const int world = std::max(1, exp.world_size());
  const int micro_batch = micro_batch_of(exp);
  const int64_t params = shape.params;
  const double n = static_cast<double>(params);
  // fp32 master weights, gradients and both AdamW moments (4 bytes each); bf16 on a GPU adds a
  // bf16 copy of the weights, and the activations are bf16.
  mem.params = 4 * n + (bf16 ? 2 * n : 0);
  mem.grads = 4 * n;
  mem.optimizer = 8 * n;
  // ZeRO-1: each rank keeps the moments of its shard; shards differ by at most one element.
  mem.optimizer_zero1 = 8 * static_cast<double>((params + world - 1) / world);
  mem.activations = static_cast<double>(shape.activation_bytes);
  // Workspace. GPU: the cuBLASLt workspace (32 MiB) plus about 512 MiB for the CUDA context and
  // library handles. CPU: the host copy of weights and both moments that a checkpoint takes
  // (12 bytes per parameter) plus the token buffers.
  const double token_buffers = 2.0 * 4 * micro_batch * m.seq_len;
  mem.workspace = gpu ? 544.0 * 1048576 : 12 * n + token_buffers;
  const bool zero = exp.distributed.zero != 0 && world > 1;
  mem.total = mem.params + mem.grads + (zero ? mem.optimizer_zero1 : mem.optimizer) +
              mem.activations + mem.workspace;
  return mem;
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

  // Step time: compute at the device's peak (or its memory traffic, whichever is slower),
  // plus the communication that backward cannot hide, plus the memory-bound AdamW loop.
  const double flops_per_rank = p.flops_per_step / p.world;
  const double compute = flops_per_rank / std::max(peak.flops, 1.0);
  // Each activation byte is written once and read about twice (forward, backward).
  const double traffic = 3 * p.bytes_activations * p.accum / std::max(peak.mem_bw, 1.0);
  const double busy = std::max(compute, traffic);
  const double comm = p.comm_bytes_per_step / std::max(peak.link_bw, 1.0);
  double exposed = comm;
  if (!zero && p.world > 1) {
    // Gradient buckets go out during backward (2/3 of compute), except those final only at its
    // end (all of them for a model that reports none earlier).
    const double last = static_cast<double>(shape.last_ready_params) / n;
    exposed = std::max(comm * last, comm - busy * 2.0 / 3.0 / p.accum);
  }
  const double shard = zero ? static_cast<double>(largest_shard) : n;
  // AdamW reads weight, grad, m, v and writes weight, m, v: 28 bytes per parameter.
  const double optimizer = 28 * shard / std::max(peak.mem_bw, 1.0);
  p.predicted_step_seconds = busy + exposed + optimizer;
  p.predicted_tokens_per_second = tokens_per_step / p.predicted_step_seconds;

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
    p.warnings.push_back(fmt::format(
        "needs {} per rank but {} has {}: lower train.micro_batch_size{}, or use more ranks",
        gib(p.bytes_total), peak.name, gib(peak.memory),
        zero || p.world == 1 ? "" : ", set distributed.zero=1"));
  }
  return p;
}

}  // namespace trainrun
