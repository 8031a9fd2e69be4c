// MLP language model (Bengio et al. 2003): embed the last seq_len tokens, concatenate them,
// hidden layers with an activation, predict the next token. The concatenation is free: the
// embedding rows of one window are already contiguous, so [B*T, C] is viewed as [B, T*C].
// The family's spec (FLOPs, measuring pass, sampling) follows the model.
#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include <memory>
#include <stdexcept>
#include <vector>

#include "classifier_loss.h"
#include "families.h"
#include "trainrun/model/activation.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/linear.h"
#include "trainrun/model/model.h"

namespace trainrun {

namespace {

class MlpModel final : public Model {
 public:
  MlpModel(const ModelConfig& cfg, Backend& be, int batch, DType dt, Bind mode)
      : cfg_(cfg),
        batch_(batch),
        ps_(be, dt),
        emb_(ps_, "wte", cfg.vocab_size, cfg.d_model, 0.02f),
        act_(be, cfg.activation),
        acts_(be),
        scratch_(be),
        host_targets_(static_cast<size_t>(batch)) {
    int in = cfg.seq_len * cfg.d_model;
    for (size_t i = 0; i < cfg.hidden.size(); ++i) {
      layers_.emplace_back(ps_, "hidden." + std::to_string(i), in, cfg.hidden[i], true,
                           1.0f / std::sqrt(static_cast<float>(in)));
      in = cfg.hidden[i];
    }
    layers_.emplace_back(ps_, "head", in, cfg.vocab_size, true, 0.02f);
    if (mode == Bind::allocate) ps_.allocate();
    bind();  // the measuring pass
    if (mode == Bind::measure_only) return;
    acts_.allocate();
    scratch_.allocate();
    bind();  // the real views
  }

  void set_batch(const int32_t* x, const int32_t* y) override {
    Backend& be = ps_.backend();
    const int64_t T = cfg_.seq_len;
    be.copy(ids_, Tensor(const_cast<int32_t*>(x), DType::i32, Device::cpu, {batch_ * T}));
    // One prediction per window: the token after the last context token.
    for (int b = 0; b < batch_; ++b) host_targets_[static_cast<size_t>(b)] = y[b * T + T - 1];
    be.copy(targets_, Tensor(host_targets_.data(), DType::i32, Device::cpu, {batch_}));
  }

  void set_documents(const int32_t* doc_start) override {
    if (doc_start)
      throw std::invalid_argument(
          "mlp: document masking needs attention (config validation refuses "
          "data.document_masking with model.type mlp)");
  }

  using Model::forward;
  void forward(bool, uint64_t, Tensor loss_sum, float grad_scale) override {
    Backend& be = ps_.backend();
    emb_.forward(emb_out_, ids_);
    Tensor in = emb_out_.reshape({batch_, static_cast<int64_t>(cfg_.seq_len) * cfg_.d_model});
    for (size_t i = 0; i < layers_.size(); ++i) {
      layers_[i].forward(pre_[i], in);
      if (i + 1 < layers_.size()) {
        act_.forward(post_[i], pre_[i]);
        in = post_[i];
      }
    }
    loss_.forward(be, pre_.back(), targets_, loss_sum, grad_scale);
  }

  void backward(float scale, uint64_t, const GradReadyFn& ready) override {
    Backend& be = ps_.backend();
    scratch_.zero(0, scratch_.bytes());
    Tensor dcur = pre_.back();
    loss_.backward(be, dcur, targets_, scale);
    for (size_t i = layers_.size(); i-- > 0;) {
      Tensor in =
          i == 0 ? emb_out_.reshape({batch_, static_cast<int64_t>(cfg_.seq_len) * cfg_.d_model})
                 : post_[i - 1];
      Tensor din = i == 0 ? demb_ : dpost_[i - 1];
      layers_[i].backward(din, dcur, in);
      if (i > 0) {
        act_.backward(dpre_[i - 1], dpost_[i - 1], pre_[i - 1]);
        dcur = dpre_[i - 1];
      }
    }
    emb_.backward(demb_.reshape({batch_ * static_cast<int64_t>(cfg_.seq_len), cfg_.d_model}), ids_);
    if (ready) ready(0, ps_.numel());
  }

  int64_t targets_per_batch() const override { return batch_; }
  Tensor logits() const override { return pre_.back(); }
  ParamStore& params() override { return ps_; }
  size_t activation_bytes() const override { return acts_.bytes() + scratch_.bytes(); }
  int batch() const override { return batch_; }
  int seq_len() const override { return cfg_.seq_len; }

 private:
  void bind() {
    const int64_t B = batch_, T = cfg_.seq_len, C = cfg_.d_model;
    const DType dt = ps_.dtype();
    acts_.restart();
    scratch_.restart();
    ids_ = acts_.take(DType::i32, {B * T});
    targets_ = acts_.take(DType::i32, {B});
    emb_out_ = acts_.take(dt, {B * T, C});
    demb_ = scratch_.take(dt, {B, T * C});
    pre_.clear();
    post_.clear();
    dpre_.clear();
    dpost_.clear();
    for (size_t i = 0; i < layers_.size(); ++i) {
      const int64_t w = layers_[i].out_features();
      pre_.push_back(acts_.take(dt, {B, w}));
      if (i + 1 < layers_.size()) {
        post_.push_back(acts_.take(dt, {B, w}));
        dpre_.push_back(scratch_.take(dt, {B, w}));
        dpost_.push_back(scratch_.take(dt, {B, w}));
      }
    }
    loss_.bind(acts_, B, ps_.stats_dtype());
  }

  ModelConfig cfg_;
  int batch_;
  ParamStore ps_;
  Embedding emb_;
  Activation act_;
  std::vector<Linear> layers_;
  Arena acts_, scratch_;
  std::vector<int32_t> host_targets_;
  Tensor ids_, targets_, emb_out_, demb_;
  ClassifierLoss loss_;
  std::vector<Tensor> pre_, post_, dpre_, dpost_;
};

double forward_flops(const ModelConfig& m) {
  double f = 0, in = static_cast<double>(m.seq_len) * m.d_model;
  for (int h : m.hidden) {
    f += 2 * in * h;
    in = h;
  }
  return f + 2 * in * m.vocab_size;
}

// Exactly seq_len tokens of context, left-padded with newlines; one prediction per window.
int64_t place_context(std::span<const int32_t> ctx, std::span<int32_t> window) {
  const size_t n = std::min(ctx.size(), window.size());
  std::fill(window.begin(), window.end(), '\n');
  const auto d = static_cast<std::ptrdiff_t>(n);
  std::copy(ctx.end() - d, ctx.end(), window.end() - d);
  return 0;
}

}  // namespace

constinit const ModelSpec kMlpSpec = {
    .type = ModelType::mlp,
    .rules = "mlp: `model.hidden` not empty",
    .validate =
        [](const ModelConfig& m, std::vector<ModelProblem>& out) {
          if (m.hidden.empty())
            out.push_back({{"model.hidden", "model.type"},
                           "model.hidden is empty: an mlp needs at least one hidden layer width, "
                           "e.g. [512]"});
        },
    .tensor_bounds =
        [](const ModelConfig& m, double, std::vector<TensorBound>& out) {
          double in = static_cast<double>(m.seq_len) * m.d_model;
          for (int h : m.hidden) {
            out.push_back({"MLP hidden layer weight", in * h});
            in = h;
          }
        },
    .describe =
        [](const ModelConfig& m) {
          return fmt::format("mlp d_model {} seq_len {} vocab {}", m.d_model, m.seq_len,
                             m.vocab_size);
        },
    .build = [](const ModelConfig& cfg, Backend& be, int batch, DType dt, ActivationCheckpointing,
                ParamStorage storage, TensorParallel) -> std::unique_ptr<Model> {
      // No blocks to recompute and no units to shard: the config rules refuse both.
      if (storage != ParamStorage::flat)
        throw std::invalid_argument("mlp: its parameters are not sharded (distributed.zero <= 1)");
      return std::make_unique<MlpModel>(cfg, be, batch, dt, Bind::allocate);
    },
    .measure =
        [](const ModelConfig& cfg, int batch, DType dt, ActivationCheckpointing, int) {
          MlpModel m(cfg, measuring_backend(), batch, dt, Bind::measure_only);
          ModelShape s = shape_of(m.params(), m.activation_bytes());
          s.last_ready_params = s.params;  // backward reports every gradient at its end
          return s;
        },
    .forward_flops_per_token = forward_flops,
    .targets_per_sequence = [](const ModelConfig&) -> int64_t { return 1; },
    .advise = [](const ModelConfig&, bool, std::vector<std::string>&) {},
    .place_context = place_context,
    .column_parallel_outputs = [](const ModelConfig&) -> std::vector<double> { return {}; },
};

}  // namespace trainrun
