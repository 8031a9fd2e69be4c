#include "trainrun/model/llama_block.h"

namespace trainrun {

LlamaBlock::LlamaBlock(ParamStore& ps, const std::string& name, const ModelConfig& cfg)
    : PreNormBlock(ps, cfg.d_model, [&] {
        const float proj_std = residual_proj_std(cfg.n_layer);
        const AttentionOptions attn{.n_kv_head = llama_kv_heads(cfg),
                                    .bias = false,
                                    .rope = true,
                                    .rope_theta = static_cast<float>(cfg.rope_theta)};
        return Parts{
            .norm1 = RMSNorm(ps, name + ".attn_norm", cfg.d_model),
            .attn =
                CausalSelfAttention(ps, name + ".attn", cfg.d_model, cfg.n_head, proj_std, attn),
            .norm2 = RMSNorm(ps, name + ".mlp_norm", cfg.d_model),
            .ffn = SwiGluMLP(ps, name + ".mlp", cfg.d_model, llama_ffn_hidden(cfg), proj_std),
        };
      }) {}

}  // namespace trainrun
