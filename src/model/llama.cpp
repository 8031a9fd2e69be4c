// Llama: token embedding (no position table: the blocks rotate q and k by position), n_layer
// pre-norm Llama blocks (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP, no biases), a
// final RMSNorm and a head that is either the token embedding (tie_embeddings) or a bias-free
// Linear "lm_head". Parameters are declared in forward order (wte, blocks, norm_f, lm_head), so
// during backward the head, norm_f and then the blocks become final in decreasing offset order
// and wte last, which is what the trainer's gradient buckets rely on. The family's spec follows.
#include <memory>
#include <vector>

#include "families.h"
#include "trainrun/model.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/linear.h"
#include "trainrun/model/llama_block.h"
#include "trainrun/model/rmsnorm.h"
#include "trainrun/rng.h"

namespace trainrun {

namespace {

class Llama final : public Model {
 public:
  Llama(const ModelConfig& cfg, Backend& be, int batch, DType dt, Bind mode)
      : cfg_(cfg),
        batch_(batch),
        ps_(be, dt),
        wte_(ps_, "wte", cfg.vocab_size, cfg.d_model, 0.02f),
        acts_(be),
        scratch_(be) {
    embed_end_ = ps_.numel();
    blocks_.reserve(static_cast<size_t>(cfg.n_layer));
    for (int l = 0; l < cfg.n_layer; ++l)
      blocks_.push_back(std::make_unique<LlamaBlock>(ps_, "blocks." + std::to_string(l), cfg));
    blocks_end_ = ps_.numel();
    norm_f_ = std::make_unique<RMSNorm>(ps_, "norm_f", cfg.d_model);
    if (!cfg.tie_embeddings)
      lm_head_ =
          std::make_unique<Linear>(ps_, "lm_head", cfg.d_model, cfg.vocab_size, false, 0.02f);
    if (mode == Bind::allocate) ps_.allocate();
    bind();  // the measuring pass
    if (mode == Bind::measure_only) return;
    acts_.allocate();
    scratch_.allocate();
    bind();  // the real views
  }

  void set_batch(const int32_t* x, const int32_t* y) override {
    Backend& be = ps_.backend();
    be.copy(ids_, Tensor(const_cast<int32_t*>(x), DType::i32, Device::cpu, {rows()}));
    be.copy(targets_, Tensor(const_cast<int32_t*>(y), DType::i32, Device::cpu, {rows()}));
  }

  double forward(bool training, uint64_t seed) override {
    Backend& be = ps_.backend();
    const float p = training ? static_cast<float>(cfg_.dropout) : 0.0f;
    wte_.forward(xs_[0], ids_);
    if (p > 0) be.dropout(xs_[0], xs_[0], p, hash_combine(seed, 0));
    for (size_t l = 0; l < blocks_.size(); ++l)
      blocks_[l]->forward(xs_[l + 1], xs_[l], p, hash_combine(seed, 100 + l));
    norm_f_->forward(norm_out_, xs_.back());
    if (lm_head_)
      lm_head_->forward(logits_, norm_out_);
    else
      be.matmul(logits_, norm_out_, wte_.weight(), Tensor{});
    be.cross_entropy(losses_, lse_, logits_, targets_);
    return be.sum(losses_) / static_cast<double>(rows());
  }

  void backward(float scale, uint64_t seed, const GradReadyFn& ready) override {
    Backend& be = ps_.backend();
    const float p = static_cast<float>(cfg_.dropout);
    scratch_.zero(0, top_end_);
    be.cross_entropy_backward(logits_, logits_, lse_, targets_, scale);
    if (lm_head_)
      lm_head_->backward(dnorm_, logits_, norm_out_);
    else
      be.matmul_backward(dnorm_, wte_.weight_grad(), Tensor{}, logits_, norm_out_, wte_.weight());
    Tensor dcur = dres_[0], dnext = dres_[1];
    norm_f_->backward(dcur, dnorm_, xs_.back());
    if (ready) ready(blocks_end_, ps_.numel());  // norm_f and lm_head
    for (size_t l = blocks_.size(); l-- > 0;) {
      be.fill(dnext, 0.0);
      blocks_[l]->backward(dnext, dcur, xs_[l], p, hash_combine(seed, 100 + l));
      std::swap(dcur, dnext);
      if (ready) ready(blocks_[l]->param_begin(), blocks_[l]->param_end());
    }
    if (p > 0) {
      be.fill(dnext, 0.0);
      be.dropout_backward(dnext, dcur, p, hash_combine(seed, 0));
      std::swap(dcur, dnext);
    }
    wte_.backward(dcur, ids_);
    if (ready) ready(0, embed_end_);
  }

  int64_t targets_per_batch() const override { return rows(); }
  Tensor logits() const override { return logits_; }
  ParamStore& params() override { return ps_; }
  size_t activation_bytes() const override { return acts_.bytes() + scratch_.bytes(); }
  int batch() const override { return batch_; }
  int seq_len() const override { return cfg_.seq_len; }
  // The token embedding's parameters: their gradients are final last (see backward).
  int64_t embed_params() const { return embed_end_; }

 private:
  int64_t rows() const { return static_cast<int64_t>(batch_) * cfg_.seq_len; }

  void bind() {
    const int64_t B = batch_, T = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, N = B * T;
    const DType dt = ps_.dtype();
    acts_.restart();
    scratch_.restart();
    ids_ = acts_.take(DType::i32, {N});
    targets_ = acts_.take(DType::i32, {N});
    xs_.clear();
    for (size_t l = 0; l <= blocks_.size(); ++l) xs_.push_back(acts_.take(dt, {N, C}));
    norm_out_ = acts_.take(dt, {N, C});
    norm_f_->bind(acts_, N);
    logits_ = acts_.take(dt, {N, V});
    losses_ = acts_.take(dt, {N});
    lse_ = acts_.take(dt, {N});
    // Gradient scratch: the residual stream ping-pong and dnorm, then the blocks' shared part.
    dres_[0] = scratch_.take(dt, {N, C});
    dres_[1] = scratch_.take(dt, {N, C});
    dnorm_ = scratch_.take(dt, {N, C});
    top_end_ = scratch_.mark();
    for (auto& b : blocks_) {
      scratch_.rewind(top_end_);
      b->bind(acts_, scratch_, B, T);
    }
  }

  ModelConfig cfg_;
  int batch_;
  ParamStore ps_;
  Embedding wte_;
  int64_t embed_end_ = 0, blocks_end_ = 0;
  std::vector<std::unique_ptr<LlamaBlock>> blocks_;
  std::unique_ptr<RMSNorm> norm_f_;
  std::unique_ptr<Linear> lm_head_;  // null when tied to wte
  Arena acts_, scratch_;
  Tensor ids_, targets_, norm_out_, logits_, losses_, lse_;
  std::vector<Tensor> xs_;  // xs_[l] is block l's input; xs_.back() the last block's output
  Tensor dres_[2], dnorm_;
  size_t top_end_ = 0;
};

// Attention's QK^T and PV per token: 2 T (n_head hd) each, n_head hd = d_model (the k/v heads
// are shared, not fewer multiplies).
double attention_flops(const ModelConfig& m) {
  return static_cast<double>(m.n_layer) * 4.0 * m.seq_len * m.d_model;
}

// matmuls per layer: qkv 2 C (NH + 2 NKV) hd, proj 2 C^2, gate_up 4 C H, down 2 H C; head 2 C V.
double forward_flops(const ModelConfig& m) {
  const double C = m.d_model, V = m.vocab_size, L = m.n_layer, H = llama_ffn_hidden(m);
  const double hd = C / m.n_head, qkv = (m.n_head + 2.0 * llama_kv_heads(m)) * hd;
  return L * (2 * C * qkv + 2 * C * C + 6 * C * H) + attention_flops(m) + 2 * C * V;
}

void advise(const ModelConfig& m, bool gpu, std::vector<std::string>& out) {
  advise_attention(m, gpu, attention_flops(m), forward_flops(m), out);
}

}  // namespace

constinit const ModelSpec kLlamaSpec = {
    .type = ModelType::llama,
    .build = [](const ModelConfig& cfg, Backend& be, int batch,
                DType dt) -> std::unique_ptr<Model> {
      return std::make_unique<Llama>(cfg, be, batch, dt, Bind::allocate);
    },
    .measure =
        [](const ModelConfig& cfg, int batch, DType dt) {
          Llama g(cfg, measuring_backend(), batch, dt, Bind::measure_only);
          ModelShape s = shape_of(g.params(), g.activation_bytes());
          s.last_ready_params = g.embed_params();
          return s;
        },
    .forward_flops_per_token = forward_flops,
    .targets_per_sequence = [](const ModelConfig& cfg) -> int64_t { return cfg.seq_len; },
    .advise = advise,
    .place_context = place_causal_context,
};

}  // namespace trainrun
