// Import from Hugging Face's layout (hf_import.h), by the table in hf_layout.h.
#include "trainrun/hf/hf_import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "hf_layout.h"
#include "trainrun/checkpoint/safetensors.h"
#include "trainrun/config/config.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/regular_file.h"

namespace trainrun {
namespace {

using json = nlohmann::json;

json read_config(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "config.json";
  const std::optional<std::string> text = read_regular_file(
      p.string(), {uint64_t{16} << 20, kExitUsage, "model.init_from names a model folder"});
  if (!text)
    throw ConfigError(fmt::format(
        "model.init_from {}: no config.json there (a Hugging Face model folder holds config.json "
        "and model.safetensors)",
        dir));
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    throw ConfigError(
        fmt::format("model.init_from {}: config.json is not JSON: {}", dir, e.what()));
  }
}

// config[key] as a number, or NaN when it is absent or not one.
double num(const json& c, const char* key) {
  return c.contains(key) && c[key].is_number() ? c[key].get<double>() : NAN;
}

}  // namespace

std::string hf_config_mismatch(const std::string& dir, const ModelConfig& m) {
  const json c = read_config(dir);
  const std::string type = c.value("model_type", "");
  std::vector<std::string> problems;
  auto expect = [&](const char* key, double want, const char* ours) {
    const double got = num(c, key);
    if (got != want)
      problems.push_back(fmt::format("{} is {}, the experiment's {} {}", key,
                                     c.contains(key) ? c[key].dump() : "missing", ours, want));
  };
  if (m.type == ModelType::gpt) {
    if (type != "gpt2")
      return fmt::format("config.json's model_type is \"{}\": model.type=gpt takes gpt2", type);
    expect("vocab_size", m.vocab_size, "model.vocab_size");
    expect("n_embd", m.d_model, "model.d_model");
    expect("n_layer", m.n_layer, "model.n_layer");
    expect("n_head", m.n_head, "model.n_head");
    if (!(num(c, "n_positions") >= m.seq_len))
      problems.push_back(fmt::format("n_positions {} is below model.seq_len {}",
                                     c.value("n_positions", json()).dump(), m.seq_len));
    if (c.contains("n_inner") && !c["n_inner"].is_null() && num(c, "n_inner") != 4.0 * m.d_model)
      problems.push_back("n_inner is not 4 n_embd (trainrun's GPT MLP is 4x)");
    const std::string act = c.value("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      problems.push_back(fmt::format(
          "activation_function {} is not the tanh GELU trainrun computes (gelu_new)", act));
    if (c.contains("layer_norm_epsilon") && num(c, "layer_norm_epsilon") != 1e-5)
      problems.push_back("layer_norm_epsilon is not 1e-5, the epsilon trainrun's LayerNorm uses");
  } else if (m.type == ModelType::llama) {
    if (type != "llama")
      return fmt::format("config.json's model_type is \"{}\": model.type=llama takes llama", type);
    expect("vocab_size", m.vocab_size, "model.vocab_size");
    expect("hidden_size", m.d_model, "model.d_model");
    expect("num_hidden_layers", m.n_layer, "model.n_layer");
    expect("num_attention_heads", m.n_head, "model.n_head");
    expect("num_key_value_heads", llama_kv_heads(m), "model.n_kv_head");
    expect("intermediate_size", llama_ffn_hidden(m), "model.ffn_hidden");
    expect("rope_theta", m.rope_theta, "model.rope_theta");
    if (c.contains("head_dim") && num(c, "head_dim") != m.d_model / m.n_head)
      problems.push_back("head_dim is not hidden_size / num_attention_heads");
    if (c.contains("rms_norm_eps") && num(c, "rms_norm_eps") != 1e-5)
      problems.push_back(fmt::format("rms_norm_eps is {}, trainrun's RMSNorm uses 1e-5",
                                     c["rms_norm_eps"].dump()));
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
      problems.push_back("rope_scaling is set: trainrun's RoPE has no scaling");
    if (c.value("attention_bias", false) || c.value("mlp_bias", false))
      problems.push_back("it has biases (attention_bias or mlp_bias): trainrun's Llama has none");
    if (c.value("hidden_act", "silu") != "silu") problems.push_back("hidden_act is not silu");
    if (c.value("tie_word_embeddings", false) != m.tie_embeddings)
      problems.push_back(fmt::format("tie_word_embeddings is {}, model.tie_embeddings {}",
                                     c.value("tie_word_embeddings", false), m.tie_embeddings));
  } else {
    hf_layout(m, false);  // throws the mlp family's refusal
  }
  std::string out;
  for (const std::string& p : problems) out += (out.empty() ? "" : "; ") + p;
  return out;
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) &&
         std::filesystem::exists(std::filesystem::path(path) / "config.json", ec);
}

ModelConfig hf_model_config(const std::string& dir, int max_seq_len) {
  const json c = read_config(dir);
  const std::string type = c.value("model_type", "");
  ModelConfig m;
  m.init_from = dir;
  auto whole = [&](const char* key) {
    const double v = num(c, key);
    if (!(v >= 1 && v <= 1e9 && v == std::floor(v)))
      throw ConfigError(fmt::format("{}/config.json: {} is {}, not a whole number >= 1", dir, key,
                                    c.contains(key) ? c[key].dump() : "missing"));
    return static_cast<int>(v);
  };
  if (type == "gpt2") {
    m.type = ModelType::gpt;
    m.vocab_size = whole("vocab_size");
    m.d_model = whole("n_embd");
    m.n_layer = whole("n_layer");
    m.n_head = whole("n_head");
    m.seq_len = std::min(whole("n_positions"), max_seq_len);
  } else if (type == "llama") {
    m.type = ModelType::llama;
    m.vocab_size = whole("vocab_size");
    m.d_model = whole("hidden_size");
    m.n_layer = whole("num_hidden_layers");
    m.n_head = whole("num_attention_heads");
    m.n_kv_head = c.contains("num_key_value_heads") ? whole("num_key_value_heads") : m.n_head;
    m.ffn_hidden = whole("intermediate_size");
    m.rope_theta = c.contains("rope_theta") ? num(c, "rope_theta") : 10000.0;
    m.tie_embeddings = c.value("tie_word_embeddings", false);
    m.seq_len = std::min(whole("max_position_embeddings"), max_seq_len);
  } else {
    throw ConfigError(fmt::format(
        "{}/config.json: model_type \"{}\" is not a family trainrun has (gpt2 or llama)", dir,
        type));
  }
  if (const std::string why = hf_config_mismatch(dir, m); !why.empty())
    throw ConfigError(fmt::format("{}: trainrun cannot compute this model: {}", dir, why));
  return m;
}

std::optional<ModelConfig> hf_model_source(const std::string& init_from) {
  if (!is_hf_model_dir(init_from)) return std::nullopt;
  return hf_model_config(init_from, INT_MAX);
}

Experiment hf_experiment(const std::string& dir, const std::vector<std::string>& overrides) {
  Experiment exp;
  exp.name = "hf";
  exp.model = hf_model_config(dir, 8192);
  const bool data_given = std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) {
    return o.rfind("data.", 0) == 0;
  });
  if (!data_given) exp.data.synthetic = "markov";
  return parse_experiment(to_yaml(exp), dir + "/config.json", overrides);
}

void load_hf(const std::string& dir, const ModelConfig& m, const std::vector<ParamEntry>& params,
             float* weights) {
  if (const std::string why = hf_config_mismatch(dir, m); !why.empty())
    throw ConfigError(fmt::format(
        "model.init_from {}: its config.json does not describe this experiment's model: {}; set "
        "the model keys to the published model's",
        dir, why));
  std::map<std::string, const ParamEntry*> by_name;
  for (const ParamEntry& p : params) by_name[p.name] = &p;
  const SafetensorsModel model(dir);
  const std::vector<HfPiece> layout = hf_layout(m, by_name.contains("lm_head.weight"));
  std::set<std::string> wanted;
  std::vector<float> buf;
  for (const HfPiece& piece : layout) {
    wanted.insert(piece.hf);
    const ParamEntry& p = *by_name.at(piece.param);
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
    std::vector<int64_t> shape = p.shape;
    if (piece.kind == HfPiece::Kind::transposed) shape = {cols, p.shape.at(0)};
    if (piece.kind == HfPiece::Kind::rows) shape = {piece.rows, cols};
    const SafeTensorInfo* t = model.find(piece.hf);
    if (!t)
      throw ConfigError(fmt::format("model.init_from {}: it has no tensor {} (for {})", dir,
                                    piece.hf, piece.param));
    std::vector<int64_t> have = t->shape;
    // GPT-2's position table may be longer than this run's context: its first rows.
    const bool positions = piece.param == "wpe.weight" && have.size() == 2 && have[1] == shape[1] &&
                           have[0] > shape[0];
    if (have != shape && !positions)
      throw ConfigError(fmt::format("model.init_from {}: tensor {} is [{}], {} needs [{}]", dir,
                                    piece.hf, fmt::join(have, ", "), piece.param,
                                    fmt::join(shape, ", ")));
    int64_t n = 1;
    for (int64_t d : have) n *= d;
    buf.resize(static_cast<size_t>(n));
    model.read_f32(piece.hf, buf.data());
    float* at = weights + p.offset;
    switch (piece.kind) {
      case HfPiece::Kind::same: {
        int64_t need = 1;
        for (int64_t d : shape) need *= d;
        std::copy(buf.begin(), buf.begin() + need, at);
        break;
      }
      case HfPiece::Kind::transposed: {
        const int64_t rows = p.shape.at(0);  // trainrun's [rows, cols] from HF's [cols, rows]
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < rows; ++r) at[r * cols + c] = buf[size_t(c * rows + r)];
        break;
      }
      case HfPiece::Kind::rows:
        std::copy(buf.begin(), buf.end(), at + piece.row0 * cols);
        break;
    }
  }
  // Tensors the table does not name: refused, but for what transformers itself ignores (GPT-2's
  // causal-mask buffers, a tied head saved beside the embedding).
  for (const std::string& name : model.names()) {
    if (wanted.contains(name)) continue;
    const bool ignored = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                         (name == "lm_head.weight" && !by_name.contains("lm_head.weight"));
    if (!ignored)
      throw ConfigError(fmt::format(
          "model.init_from {}: it has tensor {}, which this model has no place for", dir, name));
  }
}

}  // namespace trainrun
