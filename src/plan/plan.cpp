// make_plan: the cost of a run from its config alone. Parameters and FLOPs come from the shared
// FLOPs model (flops.h); activation memory mirrors the bind() functions of src/model byte for
// byte (64-byte aligned arena buffers), so the plan and the run agree exactly.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainrun/flops.h"
#include "trainrun/plan.h"

namespace trainrun {

namespace {

constexpr double kGiB = 1073741824.0;

// Arena::take rounds every buffer up to 64 bytes.
int64_t aligned(int64_t bytes) {
  return (bytes + 63) & ~int64_t{63};
}

// Both arenas of the GPT (gpt.cpp, block.cpp, attention.cpp, mlp.cpp, layernorm.cpp).
int64_t gpt_activation_bytes(const ModelConfig& m, int64_t B, int64_t s) {
  const int64_t T = m.seq_len, C = m.d_model, V = m.vocab_size, H = m.n_head, L = m.n_layer;
  const int64_t N = B * T;
  const int64_t nc = aligned(s * N * C), n1 = aligned(s * N);
  const int64_t qkv = aligned(s * N * 3 * C), hid = aligned(s * N * 4 * C);
  // per block: ln1 + ln2 (mean, rstd), attention (qkv, y, lse), mlp (h, a), 5 residual buffers
  const int64_t block_acts = 4 * n1 + qkv + nc + aligned(s * B * H * T) + 2 * hid + 5 * nc;
  const int64_t acts = 3 * aligned(4 * N)        // ids, position ids, targets (i32)
                       + nc + (L + 1) * nc + nc  // tmp, residual stream, ln_f output
                       + 2 * n1                  // ln_f mean, rstd
                       + L * block_acts + aligned(s * N * V) + 2 * n1;  // logits, losses, lse
  // Gradient scratch: residual ping-pong and dlnf, then one block's share, reused by every block.
  const int64_t block_scratch = qkv + nc + 2 * hid + 5 * nc;
  const int64_t scratch = 3 * nc + (L > 0 ? block_scratch : 0);
  return acts + scratch;
}

// Both arenas of the MLP model (mlp_model.cpp).
int64_t mlp_activation_bytes(const ModelConfig& m, int64_t B, int64_t s) {
  const int64_t T = m.seq_len, C = m.d_model;
  int64_t acts = aligned(4 * B * T) + aligned(4 * B) + aligned(s * B * T * C);
  int64_t scratch = aligned(s * B * T * C);
  for (int w : m.hidden) {
    acts += 2 * aligned(s * B * w);     // pre-activation, post-activation
    scratch += 2 * aligned(s * B * w);  // their gradients
  }
  acts += aligned(s * B * m.vocab_size) + 2 * aligned(s * B);  // logits, losses, lse
  return acts + scratch;
}

std::vector<std::pair<std::string, int64_t>> params_by_module(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, T = m.seq_len;
  std::vector<std::pair<std::string, int64_t>> out;
  out.emplace_back("wte", V * C);
  if (m.type == ModelType::mlp) {
    int64_t in = T * C;
    for (size_t i = 0; i < m.hidden.size(); ++i) {
      out.emplace_back(fmt::format("hidden.{}", i), in * m.hidden[i] + m.hidden[i]);
      in = m.hidden[i];
    }
    out.emplace_back("head", in * V + V);
    return out;
  }
  out.emplace_back("wpe", T * C);
  for (int l = 0; l < m.n_layer; ++l)
    out.emplace_back(fmt::format("blocks.{}", l), 12 * C * C + 13 * C);
  out.emplace_back("ln_f", 2 * C);
  return out;
}

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

}  // namespace

MemoryPlan plan_memory(const Experiment& exp, bool gpu) {
  MemoryPlan mem;
  const ModelConfig& m = exp.model;
  const bool bf16 = gpu && exp.train.precision == Precision::bf16;
  const int world = std::max(1, exp.world_size());
  const int micro_batch = micro_batch_of(exp);
  const int64_t params = parameter_count(m);
  const double n = static_cast<double>(params);
  // fp32 master weights, gradients and both AdamW moments (4 bytes each); bf16 on a GPU adds a
  // bf16 copy of the weights, and the activations are bf16.
  mem.params = 4 * n + (bf16 ? 2 * n : 0);
  mem.grads = 4 * n;
  mem.optimizer = 8 * n;
  // ZeRO-1: each rank keeps the moments of its shard; shards differ by at most one element.
  mem.optimizer_zero1 = 8 * static_cast<double>((params + world - 1) / world);
  const int64_t act_dtype = bf16 ? 2 : 4;
  mem.activations = static_cast<double>(m.type == ModelType::mlp
                                            ? mlp_activation_bytes(m, micro_batch, act_dtype)
                                            : gpt_activation_bytes(m, micro_batch, act_dtype));
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

Plan make_plan(const Experiment& exp, const DevicePeak& peak) {
  Plan p;
  const ModelConfig& m = exp.model;
  const bool gpu = on_gpu(peak);
  p.world = std::max(1, exp.world_size());
  p.micro_batch = micro_batch_of(exp);
  p.accum = std::max(1, exp.train.batch_size / (p.micro_batch * p.world));
  p.peak = peak;

  p.params_by_module = params_by_module(m);
  p.params = parameter_count(m);
  const double n = static_cast<double>(p.params);
  const double tokens_per_step =
      static_cast<double>(targets_per_sequence(m)) * exp.train.batch_size;
  p.flops_per_token = train_flops_per_token(m);
  p.flops_per_step = p.flops_per_token * tokens_per_step;

  const MemoryPlan mem = plan_memory(exp, gpu);
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
  if (!zero && p.world > 1 && m.type == ModelType::gpt) {
    // Gradient buckets go out during backward (2/3 of compute); the embeddings are final last.
    const double last = static_cast<double>(m.vocab_size + m.seq_len) * m.d_model / n;
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
  if (m.type == ModelType::gpt && gpu && m.n_head > 0 && (m.d_model / m.n_head) % 8 != 0)
    p.warnings.push_back(fmt::format(
        "head_dim {} (d_model {} / n_head {}) is not a multiple of 8: tensor cores want "
        "multiples of 8 (64 or 128 is best)",
        m.d_model / m.n_head, m.d_model, m.n_head));
  if (m.type == ModelType::gpt) {
    const double attention = static_cast<double>(m.n_layer) * 4.0 * m.seq_len * m.d_model;
    const double share = attention / forward_flops_per_token(m);
    if (share > 0.3)
      p.warnings.push_back(fmt::format(
          "attention is {:.0f}% of the FLOPs at seq_len {}: the T^2 term dominates; a shorter "
          "model.seq_len or a wider model.d_model uses the device better",
          100 * share, m.seq_len));
  }
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
