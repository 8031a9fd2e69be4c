// GPT: token + learned position embeddings, n_layer pre-LN transformer blocks, final LayerNorm
// and a head tied to the token embedding (GPT-2), on the shared causal-LM skeleton
// (causal_lm.h). The family's spec (rules, FLOPs, measuring pass, sampling, plan advice) follows.
#include <memory>
#include <string>
#include <vector>

#include "causal_lm.h"
#include "families.h"
#include "trainrun/model/block.h"
#include "trainrun/model/layernorm.h"

namespace trainrun {

namespace {

struct GptFamily {
  using Block = TransformerBlock;
  using Norm = LayerNorm;
  using Positions = LearnedPositions;
  static constexpr const char* kNormName = "ln_f";
  static std::unique_ptr<Block> make_block(ParamStore& ps, const std::string& name,
                                           const ModelConfig& cfg) {
    return std::make_unique<Block>(ps, name, cfg.d_model, cfg.n_head, cfg.n_layer);
  }
  static bool untied(const ModelConfig&) { return false; }  // GPT-2's head is wte
};

// matmuls: qkv 6C^2, proj 2C^2, fc 8C^2, fc proj 8C^2 per layer; head 2CV; attention 4TC.
double forward_flops(const ModelConfig& m) {
  const double C = m.d_model, V = m.vocab_size, T = m.seq_len, L = m.n_layer;
  return L * (24 * C * C + 4 * T * C) + 2 * C * V;
}

void advise(const ModelConfig& m, bool gpu, std::vector<std::string>& out) {
  advise_attention(m, gpu, static_cast<double>(m.n_layer) * 4.0 * m.seq_len * m.d_model,
                   forward_flops(m), out);
}

}  // namespace

constinit const ModelSpec kGptSpec = {
    .type = ModelType::gpt,
    .rules = "gpt: `model.d_model` divisible by `model.n_head`",
    .validate = heads_divide_width,
    .tensor_bounds =
        [](const ModelConfig& m, double batch, std::vector<TensorBound>& out) {
          attention_bounds(m, batch, out);
          out.push_back({"MLP weight (4 d_model x d_model)", 4.0 * m.d_model * m.d_model});
        },
    .describe = describe_transformer,
    .build = build_causal_lm<GptFamily>,
    .measure = measure_causal_lm<GptFamily>,
    .forward_flops_per_token = forward_flops,
    .targets_per_sequence = [](const ModelConfig& cfg) -> int64_t { return cfg.seq_len; },
    .advise = advise,
    .place_context = place_causal_context,
    .column_parallel_outputs = [](const ModelConfig& m) -> std::vector<double> {
      return {3.0 * m.d_model, 4.0 * m.d_model};  // q|k|v, fc
    },
};

}  // namespace trainrun
