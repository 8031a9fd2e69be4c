// BlockStack: the residual stream of a transformer family (gpt, llama) through its blocks,
// private to src/model. xs[0] is the embeddings' output, xs[l] block l's input, the last one the
// stream's output; dropout (when training) applies to xs[0] first. Backward runs the blocks in
// reverse over one gradient buffer, which each block turns in place from its output's gradient
// into its input's, and reports each block's parameters final as soon as they are. Block is a
// PreNormBlock instance (pre_norm_block.h).
// Activation checkpointing: with `full` each block keeps only what its bind_kept binds (its
// first norm's output and statistics; its input is the stream's xs[l]); the rest of its
// activations live in one region every block shares, which block l's backward fills again by
// recomputing block l's forward from what it kept, with the same dropout seeds, so the numbers
// are those of the run without it. With `selective` a block keeps its GEMMs' and attention's
// outputs too, and only its pointwise outputs live in the shared region (ActivationArenas),
// recomputed from the kept ones (PreNormBlock::recompute_pointwise): no GEMM runs twice.
// Units (params.h): each block is a unit of its own, acquired for its forward and its backward;
// block l's forward also reads the unit after it (block l+1's first norm, or the final norm's),
// which the stack acquires before block l runs and the caller releases after the stream.
// Thread safety: none (a model's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/core/rng.h"
#include "trainrun/model/model.h"

namespace trainrun {

template <class Block>
class BlockStack {
 public:
  // Declares n_layer blocks "blocks.0" ... in order, each its own unit of ps; make(name) builds
  // one.
  template <class Make>
  BlockStack(ParamStore& ps, int n_layer, Make&& make) : ps_(ps) {
    blocks_.reserve(static_cast<size_t>(n_layer));
    for (int l = 0; l < n_layer; ++l) {
      names_.push_back("blocks." + std::to_string(l));
      ps.begin_unit(names_.back());
      blocks_.push_back(make(names_.back()));
      units_.push_back(static_cast<int>(ps.units().size()) - 1);
    }
  }

  // The stream and two gradient buffers (the blocks' and one for the input dropout's backward),
  // [rows, dim] each.
  void bind_stream(Arena& acts, Arena& scratch, int64_t rows, int64_t dim, DType dt) {
    xs_.clear();
    for (size_t l = 0; l <= blocks_.size(); ++l) xs_.push_back(acts.take(dt, {rows, dim}));
    dres_[0] = scratch.take(dt, {rows, dim});
    dres_[1] = scratch.take(dt, {rows, dim});
  }
  // The blocks: gradient scratch shared from scratch's mark now on; activations each their own
  // in `acts`, or with checkpointing only what `mode` keeps, the rest in `shared` (restarted:
  // one region every block binds from its start). doc_start: the model's document starts
  // (CausalSelfAttention::bind).
  void bind_blocks(Arena& acts, Arena& shared, Arena& scratch, int64_t batch, int64_t seq,
                   const Tensor* doc_start, ActivationCheckpointing mode) {
    mode_ = mode;
    const int64_t rows = batch * seq;
    const size_t shared_scratch = scratch.mark();
    for (auto& b : blocks_) {
      b->bind_kept(acts, rows);
      scratch.rewind(shared_scratch);
      shared.restart();
      switch (mode) {
        case ActivationCheckpointing::none:
          b->bind({acts, acts}, scratch, batch, seq, doc_start);
          break;
        case ActivationCheckpointing::full:
          b->bind({shared, shared}, scratch, batch, seq, doc_start);
          break;
        case ActivationCheckpointing::selective:
          b->bind({acts, shared, /*recomputed=*/true}, scratch, batch, seq, doc_start);
          break;
      }
    }
  }

  Tensor input() const { return xs_.front(); }
  Tensor output() const { return xs_.back(); }
  // Where the layers after the stream accumulate d(loss)/d(output) before backward(); zeroed
  // with the rest of the top of the scratch by the model.
  Tensor output_grad() const { return dres_[0]; }
  int64_t param_begin(int64_t if_empty) const {
    return blocks_.empty() ? if_empty : blocks_.front()->param_begin();
  }
  int64_t param_end(int64_t if_empty) const {
    return blocks_.empty() ? if_empty : blocks_.back()->param_end();
  }

  // `final`: the norm after the stream and its output (final.out = final.norm(output())), fused
  // into the last block's residual add as each block's last add is into the next one's norm1.
  // final_unit: the final norm's unit, acquired here and still held on return.
  void forward(Backend& be, float p, uint64_t seed, typename Block::NormOut final,
               int final_unit) const {
    if (p > 0) be.dropout(xs_[0], xs_[0], p, hash_combine(seed, 0));
    if (blocks_.empty()) {
      ps_.acquire(final_unit, Pass::forward);
      final.norm->forward(final.out, xs_[0]);
    }
    for (size_t l = 0; l < blocks_.size(); ++l) {
      const BackendRange range(be, names_[l].c_str());
      const bool last = l + 1 == blocks_.size();
      if (l == 0) ps_.acquire(units_[0], Pass::forward);
      ps_.acquire(last ? final_unit : units_[l + 1], Pass::forward);
      const auto next = last ? final : blocks_[l + 1]->input_norm();
      blocks_[l]->forward(xs_[l + 1], xs_[l], p, hash_combine(seed, 100 + l), /*normed=*/l > 0,
                          next);
      ps_.release(units_[l], Pass::forward);
    }
  }

  // From output_grad() back through the blocks and the input dropout; returns d(loss)/d(input)
  // (one of the two gradient buffers).
  Tensor backward(Backend& be, float p, uint64_t seed, const GradReadyFn& ready) const {
    for (size_t l = blocks_.size(); l-- > 0;) {
      {
        const BackendRange range(be, names_[l].c_str());
        ps_.acquire(units_[l], Pass::backward);
        // The last block's activations are still the forward's: nothing ran in the shared
        // region since.
        if (l + 1 < blocks_.size()) recompute(l, p, seed);
        blocks_[l]->backward(dres_[0], xs_[l], p, hash_combine(seed, 100 + l));  // in place
        ps_.release(units_[l], Pass::backward);
      }
      if (ready) ready(blocks_[l]->param_begin(), blocks_[l]->param_end());
    }
    if (p <= 0) return dres_[0];
    be.fill(dres_[1], 0.0);
    be.dropout_backward(dres_[1], dres_[0], p, hash_combine(seed, 0));
    return dres_[1];
  }

 private:
  // Block l's activations for its backward, again in the shared region (mode_ says which).
  void recompute(size_t l, float p, uint64_t seed) const {
    switch (mode_) {
      case ActivationCheckpointing::none:
        break;
      case ActivationCheckpointing::full:
        blocks_[l]->recompute(xs_[l], p, hash_combine(seed, 100 + l), /*normed=*/l > 0);
        break;
      case ActivationCheckpointing::selective:
        blocks_[l]->recompute_pointwise(xs_[l]);
        break;
    }
  }

  ParamStore& ps_;
  std::vector<std::string> names_;  // "blocks.L": the blocks' profiler ranges and unit names
  std::vector<int> units_;          // block l's unit in ps_
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<Tensor> xs_;
  Tensor dres_[2];
  ActivationCheckpointing mode_ = ActivationCheckpointing::none;
};

}  // namespace trainrun
