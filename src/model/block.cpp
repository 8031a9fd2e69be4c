#include "trainrun/model/block.h"

namespace trainrun {

TransformerBlock::TransformerBlock(ParamStore& ps, const std::string& name, int d_model, int n_head,
                                   int n_layer)
    : PreNormBlock(ps, d_model, [&] {
        const float proj_std = residual_proj_std(n_layer);
        return Parts{
            .norm1 = LayerNorm(ps, name + ".ln1", d_model),
            .attn = CausalSelfAttention(ps, name + ".attn", d_model, n_head, proj_std),
            .norm2 = LayerNorm(ps, name + ".ln2", d_model),
            .ffn = MLP(ps, name + ".mlp", d_model, proj_std),
        };
      }) {}

}  // namespace trainrun
