// GPT-2's pre-LN transformer block: x1 = x + drop(attn(ln1(x))); out = x1 + drop(mlp(ln2(x1))).
// Parameters <name>.ln1, .attn.qkv, .attn.proj, .ln2, .mlp.fc, .mlp.proj (weights and biases).
#pragma once

#include <string>

#include "trainrun/model/layernorm.h"
#include "trainrun/model/mlp.h"
#include "trainrun/model/pre_norm_block.h"

namespace trainrun {

class TransformerBlock : public PreNormBlock<LayerNorm, MLP> {
 public:
  TransformerBlock(ParamStore& ps, const std::string& name, int d_model, int n_head, int n_layer);
};

}  // namespace trainrun
