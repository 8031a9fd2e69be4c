// Export to Hugging Face's layout (hf_export.h). The name and layout map, tensor by tensor:
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
#include "trainrun/hf/hf_export.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {
namespace {

using json = nlohmann::ordered_json;

class Weights {
 public:
  explicit Weights(const CheckpointData& ck) : ck_(ck) {
    for (const ParamEntry& p : ck.params) by_name_[p.name] = &p;
  }
  // The tensor as trainrun holds it, [rows, cols] row-major (a vector: one row).
  HfTensor get(const std::string& name, const std::string& as) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw CheckpointError(fmt::format("the checkpoint has no parameter {}", name));
    const ParamEntry& p = *it->second;
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    const float* at = ck_.weights.data() + p.offset;
    return HfTensor{as, p.shape, std::vector<float>(at, at + n)};
  }
  bool has(const std::string& name) const { return by_name_.contains(name); }

 private:
  const CheckpointData& ck_;
  std::map<std::string, const ParamEntry*> by_name_;
};

HfTensor transposed(HfTensor t) {
  const int64_t rows = t.shape.at(0), cols = t.shape.at(1);
  std::vector<float> out(t.data.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = t.data[size_t(r * cols + c)];
  t.data = std::move(out);
  t.shape = {cols, rows};
  return t;
}

// Rows [from, from + count) of a [rows, cols] tensor.
HfTensor rows_of(const HfTensor& t, int64_t from, int64_t count, const std::string& as) {
  const int64_t cols = t.shape.at(1);
  return HfTensor{
      as,
      {count, cols},
      std::vector<float>(t.data.begin() + from * cols, t.data.begin() + (from + count) * cols)};
}

const char* torch_dtype(SafeDtype d) {
  return d == SafeDtype::bf16 ? "bfloat16" : "float32";
}

HfModel gpt_to_hf(const ModelConfig& m, const Weights& w, SafeDtype dtype) {
  HfModel out;
  auto& t = out.tensors;
  t.push_back(w.get("wte.weight", "transformer.wte.weight"));
  t.push_back(w.get("wpe.weight", "transformer.wpe.weight"));
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string p = fmt::format("blocks.{}.", l), h = fmt::format("transformer.h.{}.", l);
    for (const char* ln : {"ln1", "ln2"}) {
      const std::string to = h + (ln == std::string("ln1") ? "ln_1." : "ln_2.");
      t.push_back(w.get(p + ln + ".weight", to + "weight"));
      t.push_back(w.get(p + ln + ".bias", to + "bias"));
    }
    const std::pair<const char*, const char*> linears[] = {{"attn.qkv", "attn.c_attn"},
                                                           {"attn.proj", "attn.c_proj"},
                                                           {"mlp.fc", "mlp.c_fc"},
                                                           {"mlp.proj", "mlp.c_proj"}};
    for (const auto& [from, to] : linears) {
      t.push_back(transposed(w.get(p + from + ".weight", h + to + ".weight")));
      t.push_back(w.get(p + from + ".bias", h + to + ".bias"));
    }
  }
  t.push_back(w.get("ln_f.weight", "transformer.ln_f.weight"));
  t.push_back(w.get("ln_f.bias", "transformer.ln_f.bias"));
  json c = {{"architectures", {"GPT2LMHeadModel"}},
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
            {"torch_dtype", torch_dtype(dtype)}};
  out.config_json = c.dump(2) + "\n";
  return out;
}

HfModel llama_to_hf(const ModelConfig& m, const Weights& w, SafeDtype dtype) {
  HfModel out;
  auto& t = out.tensors;
  const int64_t H = m.n_head, K = llama_kv_heads(m), d = m.d_model / m.n_head;
  const int64_t F = llama_ffn_hidden(m);
  t.push_back(w.get("wte.weight", "model.embed_tokens.weight"));
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string p = fmt::format("blocks.{}.", l), h = fmt::format("model.layers.{}.", l);
    t.push_back(w.get(p + "attn_norm.weight", h + "input_layernorm.weight"));
    const HfTensor qkv = w.get(p + "attn.qkv.weight", "");
    t.push_back(rows_of(qkv, 0, H * d, h + "self_attn.q_proj.weight"));
    t.push_back(rows_of(qkv, H * d, K * d, h + "self_attn.k_proj.weight"));
    t.push_back(rows_of(qkv, (H + K) * d, K * d, h + "self_attn.v_proj.weight"));
    t.push_back(w.get(p + "attn.proj.weight", h + "self_attn.o_proj.weight"));
    t.push_back(w.get(p + "mlp_norm.weight", h + "post_attention_layernorm.weight"));
    const HfTensor gate_up = w.get(p + "mlp.gate_up.weight", "");
    t.push_back(rows_of(gate_up, 0, F, h + "mlp.gate_proj.weight"));
    t.push_back(rows_of(gate_up, F, F, h + "mlp.up_proj.weight"));
    t.push_back(w.get(p + "mlp.down.weight", h + "mlp.down_proj.weight"));
  }
  t.push_back(w.get("norm_f.weight", "model.norm.weight"));
  const bool tied = !w.has("lm_head.weight");
  if (!tied) t.push_back(w.get("lm_head.weight", "lm_head.weight"));
  json c = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", m.vocab_size},
            {"hidden_size", m.d_model},
            {"intermediate_size", F},
            {"num_hidden_layers", m.n_layer},
            {"num_attention_heads", H},
            {"num_key_value_heads", K},
            {"head_dim", d},
            {"max_position_embeddings", m.seq_len},
            {"rope_theta", m.rope_theta},
            {"rms_norm_eps", 1e-5},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", 0.0},
            {"tie_word_embeddings", tied},
            {"torch_dtype", torch_dtype(dtype)}};
  out.config_json = c.dump(2) + "\n";
  return out;
}

}  // namespace

HfModel to_hf(const Experiment& exp, const CheckpointData& ck, SafeDtype dtype) {
  const Weights w(ck);
  HfModel out;
  switch (exp.model.type) {
    case ModelType::gpt:
      out = gpt_to_hf(exp.model, w, dtype);
      break;
    case ModelType::llama:
      out = llama_to_hf(exp.model, w, dtype);
      break;
    case ModelType::mlp:
      throw ConfigError(
          "export --format hf: model.type=mlp has no Hugging Face architecture (its tokens do "
          "not attend to each other); export it as a trainrun checkpoint instead");
  }
  out.generation_config_json = json{{"do_sample", false}}.dump(2) + "\n";
  return out;
}

void write_hf(const std::string& dir, const HfModel& model, SafeDtype dtype,
              uint64_t max_shard_bytes) {
  std::vector<SafeTensorOut> tensors;
  for (const HfTensor& t : model.tensors) tensors.push_back({t.name, t.shape, t.data.data()});
  write_safetensors_model(dir, tensors, dtype, max_shard_bytes);
  const std::filesystem::path d(dir);
  try {
    write_file_durably((d / "config.json").string(), model.config_json);
    write_file_durably((d / "generation_config.json").string(), model.generation_config_json);
  } catch (const std::exception& e) {
    throw CheckpointWriteError(e.what());
  }
}

}  // namespace trainrun
