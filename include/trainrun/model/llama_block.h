// Llama transformer block (pre-norm, no biases):
//   h = x + drop(attn(rmsnorm(x; attn_norm)));  out = h + drop(mlp(rmsnorm(h; mlp_norm)))
// with grouped-query attention under rotary position embedding and a SwiGLU MLP. Parameters,
// in declaration order: <name>.attn_norm, .attn.qkv, .attn.proj, .mlp_norm, .mlp.gate_up,
// .mlp.down (docs/checkpoint-format.md lists their shapes).
#pragma once

#include <string>

#include "trainrun/core/experiment.h"
#include "trainrun/model/pre_norm_block.h"
#include "trainrun/model/rmsnorm.h"
#include "trainrun/model/swiglu_mlp.h"

namespace trainrun {

class LlamaBlock : public PreNormBlock<RMSNorm, SwiGluMLP> {
 public:
  // The shape comes from cfg (d_model, n_head, n_kv_head, rope_theta, ffn_hidden, n_layer).
  LlamaBlock(ParamStore& ps, const std::string& name, const ModelConfig& cfg);
};

}  // namespace trainrun
