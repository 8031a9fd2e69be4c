// Llama: token embedding (no position table: the blocks rotate q and k by position), n_layer
// pre-norm Llama blocks (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP, no biases), a
// final RMSNorm and a head that is either the token embedding (tie_embeddings) or a bias-free
// Linear "lm_head", on the shared causal-LM skeleton (causal_lm.h). The family's spec follows.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

#include "causal_lm.h"
#include "families.h"
#include "trainrun/model/llama_block.h"
#include "trainrun/model/rmsnorm.h"

namespace trainrun {

namespace {

struct LlamaFamily {
  using Block = LlamaBlock;
  using Norm = RMSNorm;
  using Positions = NoPositions;  // the blocks rotate q and k by position
  static constexpr const char* kNormName = "norm_f";
  static std::unique_ptr<Block> make_block(ParamStore& ps, const std::string& name,
                                           const ModelConfig& cfg) {
    return std::make_unique<Block>(ps, name, cfg);
  }
  static bool untied(const ModelConfig& cfg) { return !cfg.tie_embeddings; }
};

// Attention's QK^T and PV per token: 2 T (n_head hd) each, n_head hd = d_model (the k/v heads
// are shared, not fewer multiplies).
double attention_flops(const ModelConfig& m) {
  return static_cast<double>(m.n_layer) * 4.0 * m.seq_len * m.d_model;
}

// matmuls per layer: qkv 2 C (NH + 2 NKV) hd, proj 2 C^2, gate_up 4 C H, down 2 H C; head 2 C V.
double forward_flops(const ModelConfig& m) {
  const double C = m.d_model, V = m.vocab_size, L = m.n_layer, H = llama_ffn_hidden(m);
  const double hd = C / m.n_head, qkv = (m.n_head + 2.0 * llama_kv_heads(m)) * hd;
  return L * (2 * C * qkv + 2 * C * C + 6 * C * H) + attention_flops(m) + 2 * C * V;
}

void advise(const ModelConfig& m, bool gpu, std::vector<std::string>& out) {
  advise_attention(m, gpu, attention_flops(m), forward_flops(m), out);
}

// Rotary embedding rotates pairs of channels within a head, and every group of query heads
// shares one key/value head.
void validate(const ModelConfig& m, std::vector<ModelProblem>& out) {
  heads_divide_width(m, out);
  if (m.n_head < 1 || m.d_model % m.n_head != 0) return;
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
    out.push_back({{"model.n_kv_head", "model.n_head"},
                   fmt::format("model.n_kv_head={} does not divide model.n_head={}: each key/value "
                               "head serves n_head / n_kv_head query heads; pick a divisor of "
                               "n_head (1 = multi-query)",
                               m.n_kv_head, m.n_head)});
  if ((m.d_model / m.n_head) % 2 != 0)
    out.push_back({{"model.d_model", "model.n_head"},
                   fmt::format("head dimension d_model / n_head = {} is odd: rotary position "
                               "embedding rotates channel pairs; pick d_model / n_head even",
                               m.d_model / m.n_head)});
}

}  // namespace

constinit const ModelSpec kLlamaSpec = {
    .type = ModelType::llama,
    .rules =
        "llama: `model.d_model` divisible by `model.n_head`; `model.n_kv_head` (when above 0) "
        "divides `model.n_head`; the head dimension `model.d_model` / `model.n_head` is even",
    .validate = validate,
    .tensor_bounds =
        [](const ModelConfig& m, double batch, std::vector<TensorBound>& out) {
          attention_bounds(m, batch, out);
          out.push_back(
              {"MLP weight (2 ffn_hidden x d_model)", 2.0 * llama_ffn_hidden(m) * m.d_model});
        },
    .describe = describe_transformer,
    .build = build_causal_lm<LlamaFamily>,
    .measure = measure_causal_lm<LlamaFamily>,
    .forward_flops_per_token = forward_flops,
    .targets_per_sequence = [](const ModelConfig& cfg) -> int64_t { return cfg.seq_len; },
    .advise = advise,
    .place_context = place_causal_context,
    .column_parallel_outputs = [](const ModelConfig& m) -> std::vector<double> {
      const double hd = static_cast<double>(m.d_model) / m.n_head;
      return {(m.n_head + 2.0 * llama_kv_heads(m)) * hd,
              2.0 * llama_ffn_hidden(m)};  // q|k|v, gate|up
    },
};

}  // namespace trainrun
