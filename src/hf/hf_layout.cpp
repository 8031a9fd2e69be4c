// The Hugging Face layout of trainrun's families (hf_layout.h). The name and layout map:
//   gpt (GPT2LMHeadModel)                      llama (LlamaForCausalLM)
//   wte.weight -> transformer.wte.weight       wte.weight -> model.embed_tokens.weight
//   wpe.weight -> transformer.wpe.weight       blocks.L.attn_norm -> model.layers.L.input_layernorm
//   blocks.L.ln1/ln2 -> transformer.h.L.ln_1/ln_2   blocks.L.attn.qkv [(H+2K)d, C] -> self_attn.
//   blocks.L.attn.qkv -> h.L.attn.c_attn            q_proj [Hd, C], k_proj [Kd, C], v_proj [Kd, C]
//     (Conv1D: [in, out], so transposed)       blocks.L.attn.proj -> self_attn.o_proj
//   blocks.L.attn.proj -> h.L.attn.c_proj (T)  blocks.L.mlp_norm -> post_attention_layernorm
//   blocks.L.mlp.fc -> h.L.mlp.c_fc (T)        blocks.L.mlp.gate_up [2F, C] -> mlp.gate_proj
//   blocks.L.mlp.proj -> h.L.mlp.c_proj (T)      (rows 0..F) and mlp.up_proj (rows F..2F)
//   ln_f -> transformer.ln_f                   blocks.L.mlp.down -> mlp.down_proj
//   (the head is wte: tie_word_embeddings)     norm_f -> model.norm; lm_head -> lm_head (untied)
// (T): transposed, Conv1D's [in, out]. RoPE needs no permutation: trainrun rotates the pair
// (i, i + d/2), transformers' rotate_half convention.
#include "hf_layout.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "trainrun/core/errors.h"

namespace trainrun {

std::vector<HfPiece> hf_layout(const ModelConfig& m, bool untied_head) {
  using K = HfPiece::Kind;
  std::vector<HfPiece> out;
  auto add = [&out](std::string hf, std::string param, K kind = K::same, int64_t row0 = 0,
                    int64_t rows = 0) {
    out.push_back({std::move(hf), std::move(param), kind, row0, rows});
  };
  switch (m.type) {
    case ModelType::gpt:
      add("transformer.wte.weight", "wte.weight");
      add("transformer.wpe.weight", "wpe.weight");
      for (int l = 0; l < m.n_layer; ++l) {
        const std::string p = fmt::format("blocks.{}.", l), h = fmt::format("transformer.h.{}.", l);
        for (const auto& [ln, to] : {std::pair{"ln1", "ln_1"}, std::pair{"ln2", "ln_2"}}) {
          add(h + to + ".weight", p + ln + ".weight");
          add(h + to + ".bias", p + ln + ".bias");
        }
        for (const auto& [from, to] :
             {std::pair{"attn.qkv", "attn.c_attn"}, std::pair{"attn.proj", "attn.c_proj"},
              std::pair{"mlp.fc", "mlp.c_fc"}, std::pair{"mlp.proj", "mlp.c_proj"}}) {
          add(h + to + ".weight", p + from + ".weight", K::transposed);
          add(h + to + ".bias", p + from + ".bias");
        }
      }
      add("transformer.ln_f.weight", "ln_f.weight");
      add("transformer.ln_f.bias", "ln_f.bias");
      return out;
    case ModelType::llama: {
      const int64_t H = m.n_head, KV = llama_kv_heads(m), d = m.d_model / m.n_head;
      const int64_t F = llama_ffn_hidden(m);
      add("model.embed_tokens.weight", "wte.weight");
      for (int l = 0; l < m.n_layer; ++l) {
        const std::string p = fmt::format("blocks.{}.", l), h = fmt::format("model.layers.{}.", l);
        add(h + "input_layernorm.weight", p + "attn_norm.weight");
        add(h + "self_attn.q_proj.weight", p + "attn.qkv.weight", K::rows, 0, H * d);
        add(h + "self_attn.k_proj.weight", p + "attn.qkv.weight", K::rows, H * d, KV * d);
        add(h + "self_attn.v_proj.weight", p + "attn.qkv.weight", K::rows, (H + KV) * d, KV * d);
        add(h + "self_attn.o_proj.weight", p + "attn.proj.weight");
        add(h + "post_attention_layernorm.weight", p + "mlp_norm.weight");
        add(h + "mlp.gate_proj.weight", p + "mlp.gate_up.weight", K::rows, 0, F);
        add(h + "mlp.up_proj.weight", p + "mlp.gate_up.weight", K::rows, F, F);
        add(h + "mlp.down_proj.weight", p + "mlp.down.weight");
      }
      add("model.norm.weight", "norm_f.weight");
      if (untied_head) add("lm_head.weight", "lm_head.weight");
      return out;
    }
    case ModelType::mlp:
      break;
  }
  throw ConfigError(
      "model.type=mlp has no Hugging Face architecture (its tokens do not attend to each "
      "other); use a gpt or llama model, or trainrun's own checkpoints");
}

std::string hf_config_json(const ModelConfig& m, bool untied_head, const char* torch_dtype) {
  using json = nlohmann::ordered_json;
  json c;
  if (m.type == ModelType::gpt) {
    c = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab_size},
         {"n_positions", m.seq_len},
         {"n_ctx", m.seq_len},
         {"n_embd", m.d_model},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_inner", nullptr},  // 4 n_embd
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", 1e-5},
         {"resid_pdrop", m.dropout},
         {"embd_pdrop", m.dropout},
         {"attn_pdrop", 0.0},  // trainrun drops the branches' outputs, not attention weights
         {"scale_attn_weights", true},
         {"tie_word_embeddings", true},
         {"torch_dtype", torch_dtype}};
  } else {
    c = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"vocab_size", m.vocab_size},
         {"hidden_size", m.d_model},
         {"intermediate_size", llama_ffn_hidden(m)},
         {"num_hidden_layers", m.n_layer},
         {"num_attention_heads", m.n_head},
         {"num_key_value_heads", llama_kv_heads(m)},
         {"head_dim", m.d_model / m.n_head},
         {"max_position_embeddings", m.seq_len},
         {"rope_theta", m.rope_theta},
         {"rms_norm_eps", 1e-5},
         {"hidden_act", "silu"},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"attention_dropout", 0.0},
         {"tie_word_embeddings", !untied_head},
         {"torch_dtype", torch_dtype}};
  }
  return c.dump(2) + "\n";
}

}  // namespace trainrun
