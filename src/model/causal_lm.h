// CausalLm: the skeleton the transformer families (gpt, llama) share, private to src/model: a
// token embedding "wte", the family's position scheme, n_layer blocks (BlockStack), a final
// norm and a head that is the token embedding (tied) or a bias-free Linear "lm_head", then the
// cross-entropy over every position (ClassifierLoss). A family is a traits struct:
//   Block, Norm        the block and final-norm modules
//   Positions          what is added to the token embeddings: LearnedPositions (gpt's "wpe")
//                      or NoPositions (llama rotates q and k inside its blocks)
//   kNormName          "ln_f" / "norm_f"
//   make_block(ps, name, cfg)
//   untied(cfg)        whether the head is its own "lm_head" (gpt: never)
// Document masking (set_documents): the document starts go to every block's attention, and the
// positions restart at each document (LearnedPositions here; RoPE in the attention).
// Parameters are declared in forward order (wte, positions, blocks, norm, lm_head), so during
// backward the head, the norm and then the blocks become final in decreasing offset order and
// the embeddings last, which is what the trainer's gradient buckets rely on.
// Units (params.h): "embed" (wte and the positions), one per block, "head" (the final norm and
// lm_head). A tied head reads wte at the end of the forward and writes its gradient at the start
// of the backward, so then "embed" is held across the whole pass.
// Thread safety: none (a model's).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "block_stack.h"
#include "classifier_loss.h"
#include "families.h"
#include "trainrun/core/documents.h"
#include "trainrun/model/embedding.h"
#include "trainrun/model/linear.h"
#include "trainrun/model/model.h"

namespace trainrun {

// GPT-2's learned position table "wpe", added to the token embeddings.
class LearnedPositions {
 public:
  LearnedPositions(ParamStore& ps, const ModelConfig& cfg)
      : wpe_(ps, "wpe", cfg.seq_len, cfg.d_model, 0.02f) {}
  void bind(Arena& acts, int64_t rows, int64_t dim, DType dt) {
    pos_ids_ = acts.take(DType::i32, {rows});
    tmp_ = acts.take(dt, {rows, dim});
  }
  // Position ids: t (filled once, after allocation), or with document starts [rows] (a batch's,
  // set for each batch) each position's offset in its document.
  void fill(Backend& be, int64_t rows, int seq_len, const int32_t* doc_start = nullptr) {
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = i % seq_len;
      pos[static_cast<size_t>(i)] =
          static_cast<int32_t>(t - first_key(doc_start, i / seq_len, seq_len, t));
    }
    be.copy(pos_ids_, Tensor(pos.data(), DType::i32, Device::cpu, {rows}));
  }
  void forward(Backend& be, Tensor x0) const {
    wpe_.forward(tmp_, pos_ids_);
    be.add(x0, x0, tmp_);
  }
  void backward(Tensor dx0) const { wpe_.backward(dx0, pos_ids_); }

 private:
  Embedding wpe_;
  Tensor pos_ids_, tmp_;
};

// No table: the blocks encode positions themselves (RoPE).
struct NoPositions {
  NoPositions(ParamStore&, const ModelConfig&) {}
  void bind(Arena&, int64_t, int64_t, DType) {}
  void fill(Backend&, int64_t, int, const int32_t* = nullptr) {}
  void forward(Backend&, Tensor) const {}
  void backward(Tensor) const {}
};

// ps, with the parameters declared from now on in a new unit `name` (for member initialisers).
inline ParamStore& in_unit(ParamStore& ps, const char* name) {
  ps.begin_unit(name);
  return ps;
}

template <class Family>
class CausalLm final : public Model {
 public:
  CausalLm(const ModelConfig& cfg, Backend& be, int batch, DType dt, Bind mode,
           ActivationCheckpointing checkpointing, ParamStorage storage, TensorParallel tp = {})
      : cfg_(cfg),
        batch_(batch),
        checkpointing_(checkpointing),
        ps_(be, dt, storage, tp),
        wte_(in_unit(ps_, "embed"), "wte", cfg.vocab_size, cfg.d_model, 0.02f,
             /*vocab_parallel=*/true),
        positions_(ps_, cfg),
        embed_end_(ps_.numel()),
        stack_(ps_, cfg.n_layer,
               [&](const std::string& name) { return Family::make_block(ps_, name, cfg); }),
        norm_(in_unit(ps_, "head"), Family::kNormName, cfg.d_model),
        head_unit_(static_cast<int>(ps_.units().size()) - 1),
        acts_(be),
        shared_acts_(be),
        scratch_(be) {
    if (ps_.tp().size > 1) {
      local_ids_.resize(static_cast<size_t>(rows()));
      local_targets_.resize(local_ids_.size());
    }
    if (Family::untied(cfg))
      lm_head_.emplace(ps_, "lm_head", cfg.d_model, cfg.vocab_size, false, 0.02f, true,
                       LinearTp{TpMode::column});  // by vocabulary, as wte
    if (mode == Bind::allocate) ps_.allocate();
    bind();  // the measuring pass
    if (mode == Bind::measure_only) return;
    acts_.allocate();
    shared_acts_.allocate();
    scratch_.allocate();
    bind();  // the real views
    positions_.fill(be, rows(), cfg.seq_len);
  }

  void set_batch(const int32_t* x, const int32_t* y) override {
    if (ps_.tp().size == 1) return copy_batch(ps_.backend(), ids_, targets_, x, y);
    // Vocabulary-parallel: this rank's ids and targets (the head splits as wte does).
    const int64_t n = rows();
    wte_.local_ids(x, local_ids_.data(), n);
    wte_.local_ids(y, local_targets_.data(), n);
    copy_batch(ps_.backend(), ids_, targets_, local_ids_.data(), local_targets_.data());
  }

  void set_documents(const int32_t* doc_start) override {
    Backend& be = ps_.backend();
    if (doc_start) {
      be.copy(doc_buf_, Tensor(const_cast<int32_t*>(doc_start), DType::i32, Device::cpu,
                               {doc_buf_.dim(0), doc_buf_.dim(1)}));
      doc_start_ = doc_buf_;
    } else if (doc_start_.empty()) {
      return;  // already one document per sequence
    } else {
      doc_start_ = Tensor{};
    }
    positions_.fill(be, rows(), cfg_.seq_len, doc_start);
  }

  using Model::forward;
  void forward(bool training, uint64_t seed, Tensor loss_sum, float grad_scale) override {
    Backend& be = ps_.backend();
    const Tensor x0 = stack_.input();
    ps_.acquire(kEmbedUnit, Pass::forward);
    wte_.forward(x0, ids_);
    positions_.forward(be, x0);
    if (lm_head_) ps_.release(kEmbedUnit, Pass::forward);
    // The final norm runs fused into the last block's residual add.
    stack_.forward(be, training ? static_cast<float>(cfg_.dropout) : 0.0f, seed,
                   {&norm_, norm_out_}, head_unit_);
    if (lm_head_)
      lm_head_->forward(logits_, norm_out_);
    else
      be.matmul(logits_, norm_out_, wte_.weight(), Tensor{});
    ps_.release(head_unit_, Pass::forward);
    if (!lm_head_) ps_.release(kEmbedUnit, Pass::forward);
    loss_.forward(be, logits_, targets_, loss_sum, grad_scale);
  }

  void backward(float scale, uint64_t seed, const GradReadyFn& ready) override {
    Backend& be = ps_.backend();
    scratch_.zero(0, top_end_);
    ps_.acquire(head_unit_, Pass::backward);
    if (!lm_head_) ps_.acquire(kEmbedUnit, Pass::backward);
    loss_.backward(be, logits_, targets_, scale);
    // Vocabulary-parallel, the head's input gradient is this rank's part of the sum (an lm_head
    // is a column-parallel Linear, which sums its own).
    if (lm_head_)
      lm_head_->backward(dnorm_, logits_, norm_out_, GradWrite::overwrite);
    else if (ps_.tp().size > 1)
      matmul_backward_tp_sum(ps_.tp(), be, dnorm_, wte_.weight_grad(), Tensor{}, logits_, norm_out_,
                             wte_.weight(), GradWrite::accumulate, wte_.weight_grad_write());
    else
      be.matmul_backward(dnorm_, wte_.weight_grad(), Tensor{}, logits_, norm_out_, wte_.weight(),
                         GradWrite::accumulate, wte_.weight_grad_write());
    norm_.backward(stack_.output_grad(), dnorm_, stack_.output());
    ps_.release(head_unit_, Pass::backward);
    if (ready) ready(stack_.param_end(embed_end_), ps_.numel());  // the norm and lm_head
    const Tensor dx = stack_.backward(be, static_cast<float>(cfg_.dropout), seed, ready);
    if (lm_head_) ps_.acquire(kEmbedUnit, Pass::backward);
    wte_.backward(dx, ids_);
    positions_.backward(dx);
    ps_.release(kEmbedUnit, Pass::backward);
    if (ready) ready(0, embed_end_);
  }

  int64_t targets_per_batch() const override { return rows(); }
  Tensor logits() const override { return logits_; }
  ParamStore& params() override { return ps_; }
  size_t activation_bytes() const override {
    return acts_.bytes() + shared_acts_.bytes() + scratch_.bytes();
  }
  int batch() const override { return batch_; }
  int seq_len() const override { return cfg_.seq_len; }
  // The embeddings' parameters: their gradients are final last (see backward).
  int64_t embed_params() const { return embed_end_; }

 private:
  int64_t rows() const { return static_cast<int64_t>(batch_) * cfg_.seq_len; }

  void bind() {
    const int64_t B = batch_, T = cfg_.seq_len, C = cfg_.d_model, N = B * T;
    const DType dt = ps_.dtype();
    acts_.restart();
    scratch_.restart();
    ids_ = acts_.take(DType::i32, {N});
    targets_ = acts_.take(DType::i32, {N});
    doc_buf_ = acts_.take(DType::i32, {B, T});
    doc_start_ = Tensor{};
    positions_.bind(acts_, N, C, dt);
    stack_.bind_stream(acts_, scratch_, N, C, dt);
    norm_out_ = acts_.take(dt, {N, C});
    norm_.bind(acts_, N);
    logits_ = acts_.take(dt, {N, wte_.rows()});  // this rank's part of the vocabulary
    loss_.bind(acts_, N, ps_.stats_dtype(), ps_.tp());
    dnorm_ = scratch_.take(dt, {N, C});
    top_end_ = scratch_.mark();  // the stream's gradients and dnorm; then the blocks' shared part
    stack_.bind_blocks(acts_, shared_acts_, scratch_, B, T, &doc_start_, checkpointing_);
  }

  ModelConfig cfg_;
  int batch_;
  ActivationCheckpointing checkpointing_;  // what the blocks recompute (BlockStack)
  ParamStore ps_;
  Embedding wte_;
  typename Family::Positions positions_;
  int64_t embed_end_;  // wte and the positions: [0, embed_end_) of the flat buffers
  BlockStack<typename Family::Block> stack_;
  typename Family::Norm norm_;
  static constexpr int kEmbedUnit = 0;  // "embed", declared first
  int head_unit_;                       // "head": the final norm and lm_head
  std::optional<Linear> lm_head_;       // absent when the head is tied to wte
  Arena acts_, shared_acts_, scratch_;  // shared_acts_: what checkpointing recomputes
  Tensor ids_, targets_, norm_out_, logits_, dnorm_;
  std::vector<int32_t> local_ids_, local_targets_;  // vocabulary-parallel: set_batch's shifts
  ClassifierLoss loss_;
  Tensor doc_buf_;    // [B,T] i32: document starts, when set_documents gave some
  Tensor doc_start_;  // what the attention reads: doc_buf_, or empty (no document masking)
  size_t top_end_ = 0;
};

// A family's ModelSpec build and measure.
template <class Family>
std::unique_ptr<Model> build_causal_lm(const ModelConfig& cfg, Backend& be, int batch, DType dt,
                                       ActivationCheckpointing checkpointing, ParamStorage storage,
                                       TensorParallel tp) {
  return std::make_unique<CausalLm<Family>>(cfg, be, batch, dt, Bind::allocate, checkpointing,
                                            storage, tp);
}

template <class Family>
ModelShape measure_causal_lm(const ModelConfig& cfg, int batch, DType dt,
                             ActivationCheckpointing checkpointing, int tp) {
  // Declaring a split takes the group's size and this rank's place, not its communicator.
  CausalLm<Family> m(cfg, measuring_backend(), batch, dt, Bind::measure_only, checkpointing,
                     ParamStorage::flat, TensorParallel{tp, 0, nullptr});
  ModelShape s = shape_of(m.params(), m.activation_bytes());
  s.last_ready_params = m.embed_params();
  return s;
}

}  // namespace trainrun
