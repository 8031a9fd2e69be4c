// The registry of model families, and what their specs share.
#include "trainrun/model/model_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <iterator>

#include "families.h"

namespace trainrun {

namespace {

// "blocks.3.attn.qkv.weight" -> "blocks.3"; "wte.weight" -> "wte".
std::string module_of(const std::string& param) {
  const size_t dot = param.find('.');
  if (dot == std::string::npos) return param;
  size_t end = dot + 1;
  while (end < param.size() && std::isdigit(static_cast<unsigned char>(param[end]))) ++end;
  const bool numbered = end > dot + 1 && (end == param.size() || param[end] == '.');
  return param.substr(0, numbered ? end : dot);
}

}  // namespace

const ModelSpec& model_spec(ModelType type) {
  // One entry per family, in ModelType order.
  static const ModelSpec* const kFamilies[] = {&kGptSpec, &kMlpSpec, &kLlamaSpec};
  static_assert(std::size(kFamilies) == std::size(EnumNames<ModelType>::names));
  return *kFamilies[static_cast<size_t>(type)];
}

std::unique_ptr<Model> build_model(const ModelConfig& cfg, Backend& be, int batch, DType dtype,
                                   ActivationCheckpointing checkpointing, ParamStorage storage,
                                   TensorParallel tp) {
  return model_spec(cfg.type).build(cfg, be, batch, dtype, checkpointing, storage, tp);
}

Backend& measuring_backend() {
  static const std::unique_ptr<Backend> be = make_cpu_backend();
  return *be;
}

ModelShape shape_of(const ParamStore& ps, size_t activation_bytes) {
  ModelShape s;
  s.params = ps.numel();
  s.activation_bytes = static_cast<int64_t>(activation_bytes);
  for (const auto& p : ps.infos()) {
    std::string module = module_of(p.name);
    if (s.params_by_module.empty() || s.params_by_module.back().first != module)
      s.params_by_module.emplace_back(std::move(module), 0);
    s.params_by_module.back().second += p.numel;
  }
  for (const ParamUnit& u : ps.units()) s.unit_params.push_back(u.numel());
  return s;
}

void copy_batch(Backend& be, Tensor ids, Tensor targets, const int32_t* x, const int32_t* y) {
  be.copy(ids, Tensor(const_cast<int32_t*>(x), DType::i32, Device::cpu, {ids.numel()}));
  be.copy(targets, Tensor(const_cast<int32_t*>(y), DType::i32, Device::cpu, {targets.numel()}));
}

int64_t place_causal_context(std::span<const int32_t> ctx, std::span<int32_t> window) {
  const size_t n = std::min(ctx.size(), window.size());
  std::fill(window.begin(), window.end(), 0);
  std::copy(ctx.end() - static_cast<std::ptrdiff_t>(n), ctx.end(), window.begin());
  return static_cast<int64_t>(n) - 1;
}

void heads_divide_width(const ModelConfig& m, std::vector<ModelProblem>& out) {
  if (m.n_head > 0 && m.d_model % m.n_head != 0)
    out.push_back({{"model.d_model", "model.n_head"},
                   fmt::format("model.d_model={} is not divisible by model.n_head={}: each head "
                               "gets d_model / n_head channels; pick d_model a multiple of n_head",
                               m.d_model, m.n_head)});
}

void attention_bounds(const ModelConfig& m, double batch, std::vector<TensorBound>& out) {
  const double C = m.d_model, T = m.seq_len;
  out.push_back(
      {"parameters of all blocks (about n_layer x 12 d_model^2)", 12.0 * m.n_layer * C * C});
  out.push_back({"attention scores (batch_size x n_head x seq_len^2)", batch * m.n_head * T * T});
}

std::string describe_transformer(const ModelConfig& m) {
  return fmt::format("{} {} layers d_model {} heads {} seq_len {} vocab {}", enum_name(m.type),
                     m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size);
}

void advise_attention(const ModelConfig& m, bool gpu, double attention_flops, double forward_flops,
                      std::vector<std::string>& out) {
  if (gpu && m.n_head > 0 && (m.d_model / m.n_head) % 8 != 0)
    out.push_back(fmt::format(
        "head_dim {} (d_model {} / n_head {}) is not a multiple of 8: tensor cores want "
        "multiples of 8 (64 or 128 is best)",
        m.d_model / m.n_head, m.d_model, m.n_head));
  const double share = attention_flops / forward_flops;
  if (share > 0.3)
    out.push_back(fmt::format(
        "attention is {:.0f}% of the FLOPs at seq_len {}: the T^2 term dominates; a shorter "
        "model.seq_len or a wider model.d_model uses the device better",
        100 * share, m.seq_len));
}

}  // namespace trainrun
