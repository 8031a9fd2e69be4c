// Llama: token embedding (no position table: the blocks rotate q and k by position), n_layer
// pre-norm Llama blocks (RMSNorm, grouped-query attention with RoPE, SwiGLU MLP, no biases), a
// final RMSNorm and a head that is either the token embedding (tie_embeddings) or a bias-free
// Linear "lm_head". Parameters are declared in forward order (wte, blocks, norm_f, lm_head), so
// during backward the head, norm_f and then the blocks become final in decreasing offset order
// and wte last, which is what the trainer's gradient buckets rely on. The family's spec follows.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

#include "block_stack.h"
#include "families.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/linear.h"
#include "trainrun/model/llama_block.h"
#include "trainrun/model/model.h"
#include "trainrun/model/rmsnorm.h"

namespace trainrun {

namespace {

class Llama final : public Model {
 public:
  Llama(const ModelConfig& cfg, Backend& be, int batch, DType dt, Bind mode)
      : cfg_(cfg),
        batch_(batch),
        ps_(be, dt),
        wte_(ps_, "wte", cfg.vocab_size, cfg.d_model, 0.02f),
        embed_end_(ps_.numel()),
        stack_(
            cfg.n_layer,
            [&](const std::string& name) { return std::make_unique<LlamaBlock>(ps_, name, cfg); }),
        norm_f_(ps_, "norm_f", cfg.d_model),
        acts_(be),
        scratch_(be) {
    if (!cfg.tie_embeddings)
      lm_head_.emplace(ps_, "lm_head", cfg.d_model, cfg.vocab_size, false, 0.02f);
    if (mode == Bind::allocate) ps_.allocate();
    bind();  // the measuring pass
    if (mode == Bind::measure_only) return;
    acts_.allocate();
    scratch_.allocate();
    bind();  // the real views
  }

  void set_batch(const int32_t* x, const int32_t* y) override {
    copy_batch(ps_.backend(), ids_, targets_, x, y);
  }

  double forward(bool training, uint64_t seed) override {
    Backend& be = ps_.backend();
    wte_.forward(stack_.input(), ids_);
    stack_.forward(be, training ? static_cast<float>(cfg_.dropout) : 0.0f, seed);
    norm_f_.forward(norm_out_, stack_.output());
    if (lm_head_)
      lm_head_->forward(logits_, norm_out_);
    else
      be.matmul(logits_, norm_out_, wte_.weight(), Tensor{});
    be.cross_entropy(losses_, lse_, logits_, targets_);
    return be.sum(losses_) / static_cast<double>(rows());
  }

  void backward(float scale, uint64_t seed, const GradReadyFn& ready) override {
    Backend& be = ps_.backend();
    scratch_.zero(0, top_end_);
    be.cross_entropy_backward(logits_, logits_, lse_, targets_, scale);
    if (lm_head_)
      lm_head_->backward(dnorm_, logits_, norm_out_);
    else
      be.matmul_backward(dnorm_, wte_.weight_grad(), Tensor{}, logits_, norm_out_, wte_.weight(),
                         GradWrite::accumulate, wte_.weight_grad_write());
    norm_f_.backward(stack_.output_grad(), dnorm_, stack_.output());
    if (ready) ready(stack_.param_end(embed_end_), ps_.numel());  // norm_f and lm_head
    wte_.backward(stack_.backward(be, static_cast<float>(cfg_.dropout), seed, ready), ids_);
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
    stack_.bind_stream(acts_, scratch_, N, C, dt);
    norm_out_ = acts_.take(dt, {N, C});
    norm_f_.bind(acts_, N);
    logits_ = acts_.take(dt, {N, V});
    losses_ = acts_.take(ps_.stats_dtype(), {N});
    lse_ = acts_.take(ps_.stats_dtype(), {N});
    dnorm_ = scratch_.take(dt, {N, C});
    top_end_ = scratch_.mark();  // the stream's gradients and dnorm; then the blocks' shared part
    stack_.bind_blocks(acts_, scratch_, B, T);
  }

  ModelConfig cfg_;
  int batch_;
  ParamStore ps_;
  Embedding wte_;
  int64_t embed_end_;  // wte: [0, embed_end_) of the flat buffers
  BlockStack<LlamaBlock> stack_;
  RMSNorm norm_f_;
  std::optional<Linear> lm_head_;  // absent when the head is tied to wte
  Arena acts_, scratch_;
  Tensor ids_, targets_, norm_out_, logits_, losses_, lse_, dnorm_;
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

// Rotary embedding rotates pairs of channels within a head, and every group of query heads
// shares one key/value head.
void validate(const ModelConfig& m, std::vector<ModelProblem>& out) {
  heads_divide_width(m, out);
  if (m.n_head < 1 || m.d_model % m.n_head != 0) return;
  if (m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
    out.push_back({{"model.n_kv_head", "model.n_head"},
                   fmt::format("model.n_kv_head={} does not divide model.n_head={}: each key/value "
                               "head serves n_head / n_kv_head query heads; pick a divisor of "
                               "n_head (1 = multi-query)",
                               m.n_kv_head, m.n_head)});
  if ((m.d_model / m.n_head) % 2 != 0)
    out.push_back({{"model.d_model", "model.n_head"},
                   fmt::format("head dimension d_model / n_head = {} is odd: rotary position "
                               "embedding rotates channel pairs; pick d_model / n_head even",
                               m.d_model / m.n_head)});
}

}  // namespace

constinit const ModelSpec kLlamaSpec = {
    .type = ModelType::llama,
    .rules =
        "llama: `model.d_model` divisible by `model.n_head`; `model.n_kv_head` (when above 0) "
        "divides `model.n_head`; the head dimension `model.d_model` / `model.n_head` is even",
    .validate = validate,
    .tensor_bounds =
        [](const ModelConfig& m, double batch, std::vector<TensorBound>& out) {
          attention_bounds(m, batch, out);
          out.push_back(
              {"MLP weight (2 ffn_hidden x d_model)", 2.0 * llama_ffn_hidden(m) * m.d_model});
        },
    .describe = describe_transformer,
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
