// PreNormBlock: the residual structure the transformer families share,
//   x1 = x + drop(attn(norm1(x)));  out = x1 + drop(ffn(norm2(x1))),
// over a normalisation (LayerNorm, RMSNorm: bind(acts, rows), forward(out, in),
// forward_residual(sum, out, x, y), backward(din +=, dout, in)) and a feed-forward module (MLP,
// SwiGluMLP: bind(acts, scratch, rows), forward(out, in), backward(din, dout, in, GradWrite),
// din += or = with GradWrite::overwrite).
// TransformerBlock (block.h) and LlamaBlock (llama_block.h) are its two instances; they choose
// the parts and their parameter names.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include "trainrun/model/attention.h"

namespace trainrun {

// GPT-2's init, kept by Llama: the residual projections (attention and feed-forward outputs)
// start at std 0.02 / sqrt(2 n_layer), so the residual stream's variance does not grow with depth.
inline float residual_proj_std(int n_layer) {
  return 0.02f / std::sqrt(2.0f * static_cast<float>(n_layer));
}

template <class Norm, class Ffn>
class PreNormBlock {
 public:
  // The parts in declaration order, which is their parameters' order.
  struct Parts {
    Norm norm1;
    CausalSelfAttention attn;
    Norm norm2;
    Ffn ffn;
  };
  // A norm and the tensor it writes: where a block's last residual add can be fused.
  struct NormOut {
    const Norm* norm = nullptr;
    Tensor out;
  };
  // What a block keeps for its backward when the rest is recomputed: norm1's output and
  // statistics (the block before wrote them, fused into its last add, and no recomputation
  // could give the same bits). Bound before bind().
  void bind_kept(Arena& acts, int64_t rows);
  // The other activations: the attention's and the projections' outputs kept, the residual
  // sums, norm2's and the feed-forward's pointwise outputs in acts.pointwise (ActivationArenas).
  // Gradient scratch is shared by all blocks (one backward at a time).
  void bind(ActivationArenas acts, Arena& scratch, int64_t batch, int64_t seq,
            const Tensor* doc_start);
  void bind(Arena& acts, Arena& scratch, int64_t batch, int64_t seq, const Tensor* doc_start) {
    bind({acts, acts}, scratch, batch, seq, doc_start);
  }
  // Each residual add runs fused into the norm that reads its sum (Norm::forward_residual):
  // x1's into norm2, and out's into `next` when given (the next block's norm1, or the model's
  // final norm: next.out = next.norm(out)), else a plain add. With `normed`, norm1(x) is
  // already in input_norm().out: the block before fused it.
  void forward(Tensor out, Tensor x, float dropout, uint64_t seed, bool normed = false,
               NormOut next = {}) const;
  // norm1 and its output, for the block before this one.
  NormOut input_norm() const { return {&p_.norm1, n1_}; }
  // forward() again from `x` and what bind_kept holds, up to what backward() reads (not the
  // output), with the same arguments: after other blocks used the shared activations.
  void recompute(Tensor x, float dropout, uint64_t seed, bool normed) const;
  // Selective checkpointing's recomputation: the pointwise outputs backward() reads, from the
  // kept ones and the block's input x: x1 = x + drop(ao) (ao is kept after its dropout, so no
  // mask is drawn again), norm2(x1) and the feed-forward's activation.
  void recompute_pointwise(Tensor x) const;
  // The residual stream's gradient, in place: dstream holds d(loss)/d(out) and becomes
  // d(loss)/d(x). Both residual branches add their input gradients into it, so the stream is
  // never copied. Reuses the shared scratch.
  void backward(Tensor dstream, Tensor x, float dropout, uint64_t seed) const;
  int64_t param_begin() const { return begin_; }
  int64_t param_end() const { return end_; }

 protected:
  // make() declares the parts' parameters; the block's range of the flat buffers is theirs.
  template <class Make>
  PreNormBlock(ParamStore& ps, int d_model, Make&& make)
      : ps_(ps), begin_(ps.numel()), p_(std::forward<Make>(make)()), dim_(d_model) {
    end_ = ps.numel();
  }

 private:
  ParamStore& ps_;
  int64_t begin_, end_ = 0;  // this block's range of the flat buffers
  Parts p_;
  int dim_;
  // The two residual branches up to the feed-forward's output (what backward reads).
  void branches(Tensor x, float dropout, uint64_t seed, bool normed) const;

  Tensor n1_, ao_, x1_, n2_, mo_;  // activations (n1_, ao_: kept; x1_, n2_, mo_: pointwise)
  Tensor dmo_, dn2_, dao_, dn1_;   // gradient scratch
};

}  // namespace trainrun
