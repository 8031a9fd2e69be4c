// GPT: token + position embeddings, n_layer pre-LN transformer blocks, final LayerNorm and a
// head tied to the token embedding (GPT-2). Parameters are declared in forward order, so the
// blocks' gradients become final in decreasing offset order during backward, which is what the
// trainer's gradient buckets rely on. The family's spec (FLOPs, measuring pass, sampling, plan
// advice) follows the model.
#include <memory>
#include <string>
#include <vector>

#include "block_stack.h"
#include "families.h"
#include "trainrun/model/block.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/layernorm.h"
#include "trainrun/model/model.h"

namespace trainrun {

namespace {

class Gpt final : public Model {
 public:
  Gpt(const ModelConfig& cfg, Backend& be, int batch, DType dt, Bind mode)
      : cfg_(cfg),
        batch_(batch),
        ps_(be, dt),
        wte_(ps_, "wte", cfg.vocab_size, cfg.d_model, 0.02f),
        wpe_(ps_, "wpe", cfg.seq_len, cfg.d_model, 0.02f),
        embed_end_(ps_.numel()),
        stack_(cfg.n_layer,
               [&](const std::string& name) {
                 return std::make_unique<TransformerBlock>(ps_, name, cfg.d_model, cfg.n_head,
                                                           cfg.n_layer);
               }),
        lnf_(ps_, "ln_f", cfg.d_model),
        acts_(be),
        scratch_(be) {
    if (mode == Bind::allocate) ps_.allocate();
    bind();  // the measuring pass
    if (mode == Bind::measure_only) return;
    acts_.allocate();
    scratch_.allocate();
    bind();  // the real views
    // Position ids are the same for every batch: fill them once.
    std::vector<int32_t> pos(static_cast<size_t>(rows()));
    for (int64_t i = 0; i < rows(); ++i)
      pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % cfg.seq_len);
    be.copy(pos_ids_, Tensor(pos.data(), DType::i32, Device::cpu, {rows()}));
  }

  void set_batch(const int32_t* x, const int32_t* y) override {
    copy_batch(ps_.backend(), ids_, targets_, x, y);
  }

  double forward(bool training, uint64_t seed) override {
    Backend& be = ps_.backend();
    const Tensor x0 = stack_.input();
    wte_.forward(x0, ids_);
    wpe_.forward(tmp_, pos_ids_);
    be.add(x0, x0, tmp_);
    stack_.forward(be, training ? static_cast<float>(cfg_.dropout) : 0.0f, seed);
    lnf_.forward(lnf_out_, stack_.output());
    be.matmul(logits_, lnf_out_, wte_.weight(), Tensor{});
    be.cross_entropy(losses_, lse_, logits_, targets_);
    return be.sum(losses_) / static_cast<double>(rows());
  }

  void backward(float scale, uint64_t seed, const GradReadyFn& ready) override {
    Backend& be = ps_.backend();
    scratch_.zero(0, top_end_);
    be.cross_entropy_backward(logits_, logits_, lse_, targets_, scale);
    be.matmul_backward(dlnf_, wte_.weight_grad(), Tensor{}, logits_, lnf_out_, wte_.weight(),
                       GradWrite::accumulate, wte_.weight_grad_write());
    lnf_.backward(stack_.output_grad(), dlnf_, stack_.output());
    if (ready) ready(stack_.param_end(embed_end_), ps_.numel());
    const Tensor dx = stack_.backward(be, static_cast<float>(cfg_.dropout), seed, ready);
    wte_.backward(dx, ids_);
    wpe_.backward(dx, pos_ids_);
    if (ready) ready(0, embed_end_);
  }

  int64_t targets_per_batch() const override { return rows(); }
  Tensor logits() const override { return logits_; }
  ParamStore& params() override { return ps_; }
  size_t activation_bytes() const override { return acts_.bytes() + scratch_.bytes(); }
  int batch() const override { return batch_; }
  int seq_len() const override { return cfg_.seq_len; }
  // The embeddings' parameters: their gradients are final last (see backward).
  int64_t embed_params() const { return embed_end_; }

 private:
  int64_t rows() const { return static_cast<int64_t>(batch_) * cfg_.seq_len; }

  void bind() {
    const int64_t B = batch_, T = cfg_.seq_len, C = cfg_.d_model, V = cfg_.vocab_size, N = B * T;
    const DType dt = ps_.dtype();
    acts_.restart();
    scratch_.restart();
    ids_ = acts_.take(DType::i32, {N});
    pos_ids_ = acts_.take(DType::i32, {N});
    targets_ = acts_.take(DType::i32, {N});
    tmp_ = acts_.take(dt, {N, C});
    stack_.bind_stream(acts_, scratch_, N, C, dt);
    lnf_out_ = acts_.take(dt, {N, C});
    lnf_.bind(acts_, N);
    logits_ = acts_.take(dt, {N, V});
    losses_ = acts_.take(ps_.stats_dtype(), {N});
    lse_ = acts_.take(ps_.stats_dtype(), {N});
    dlnf_ = scratch_.take(dt, {N, C});
    top_end_ = scratch_.mark();  // the stream's gradients and dlnf; then the blocks' shared part
    stack_.bind_blocks(acts_, scratch_, B, T);
  }

  ModelConfig cfg_;
  int batch_;
  ParamStore ps_;
  Embedding wte_, wpe_;
  int64_t embed_end_;  // wte and wpe: [0, embed_end_) of the flat buffers
  BlockStack<TransformerBlock> stack_;
  LayerNorm lnf_;
  Arena acts_, scratch_;
  Tensor ids_, pos_ids_, targets_, tmp_, lnf_out_, logits_, losses_, lse_, dlnf_;
  size_t top_end_ = 0;
};

// matmuls: qkv 6C^2, proj 2C^2, fc 8C^2, fc proj 8C^2 per layer; head 2CV; attention 4TC.
double forward_flops(const ModelConfig& m) {
  const double C = m.d_model, V = m.vocab_size, T = m.seq_len, L = m.n_layer;
  return L * (24 * C * C + 4 * T * C) + 2 * C * V;
}

void advise(const ModelConfig& m, bool gpu, std::vector<std::string>& out) {
  advise_attention(m, gpu, static_cast<double>(m.n_layer) * 4.0 * m.seq_len * m.d_model,
                   forward_flops(m), out);
}

}  // namespace

constinit const ModelSpec kGptSpec = {
    .type = ModelType::gpt,
    .rules = "gpt: `model.d_model` divisible by `model.n_head`",
    .validate = heads_divide_width,
    .tensor_bounds =
        [](const ModelConfig& m, double batch, std::vector<TensorBound>& out) {
          attention_bounds(m, batch, out);
          out.push_back({"MLP weight (4 d_model x d_model)", 4.0 * m.d_model * m.d_model});
        },
    .describe = describe_transformer,
    .build = [](const ModelConfig& cfg, Backend& be, int batch,
                DType dt) -> std::unique_ptr<Model> {
      return std::make_unique<Gpt>(cfg, be, batch, dt, Bind::allocate);
    },
    .measure =
        [](const ModelConfig& cfg, int batch, DType dt) {
          Gpt g(cfg, measuring_backend(), batch, dt, Bind::measure_only);
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
