// Model: a language model built from the fixed modules, trained by the Trainer through this
// small interface. Owns its parameters (one flat buffer) and its activation arena.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "trainrun/core/experiment.h"
#include "trainrun/model/params.h"

namespace trainrun {

// Called during backward whenever a contiguous range [begin, end) of the flat gradient buffer
// is final for this micro-batch, in decreasing offset order. The trainer starts allreduces here.
using GradReadyFn = std::function<void(int64_t begin, int64_t end)>;

class Model {
 public:
  virtual ~Model() = default;
  // x, y: host token ids [batch, seq_len]; y is x shifted by one.
  virtual void set_batch(const int32_t* x, const int32_t* y) = 0;
  // Document masking (Backend::attention) for the micro-batches that follow: doc_start
  // [batch, seq_len] host document starts of the x given to set_batch (documents.h), or nullptr
  // (the default): every sequence one document. A family without attention (mlp) takes only
  // nullptr.
  virtual void set_documents(const int32_t* doc_start) = 0;
  // The forward pass. The sum of this micro-batch's target losses goes to loss_sum, one f64
  // element on the backend's device, and the host does not wait for it: the trainer reads all of
  // a step's losses in one copy, so a GPU's queue never drains between forward and backward.
  // grad_scale > 0 (training): the loss's gradient at that scale is computed in the same pass
  // over the logits (Backend::cross_entropy_fused), logits() holds it afterwards, and the
  // backward that follows must be given the same scale. 0: the logits are kept.
  virtual void forward(bool training, uint64_t dropout_seed, Tensor loss_sum, float grad_scale) = 0;
  // forward(training, seed, own scalar, 0), waiting for the result: the mean loss over this
  // micro-batch's targets.
  double forward(bool training, uint64_t dropout_seed);
  // Gradients of (scale x summed loss) accumulate into params().grads().
  virtual void backward(float scale, uint64_t dropout_seed, const GradReadyFn& ready) = 0;
  virtual int64_t targets_per_batch() const = 0;
  // [targets_per_batch, vocab] logits of the last forward (until backward, or a forward with a
  // grad_scale, overwrites them with their gradient).
  virtual Tensor logits() const = 0;
  virtual ParamStore& params() = 0;
  virtual size_t activation_bytes() const = 0;  // both arenas
  virtual int batch() const = 0;
  virtual int seq_len() const = 0;

 private:
  DeviceBuffer loss_sum_;  // forward(training, seed)'s one f64, allocated on first use
};

// Builds, allocates and binds a model for micro-batches of `batch` sequences. `checkpointing`
// (train.activation_checkpointing): what a transformer's blocks keep for their backward and
// what they recompute in it (block_stack.h, ActivationArenas). `storage`
// external (ZeRO-2/3): the parameters' memory is bound unit by unit by the data-parallel
// strategy (params.h).
std::unique_ptr<Model> build_model(
    const ModelConfig& cfg, Backend& be, int batch, DType dtype = DType::f32,
    ActivationCheckpointing checkpointing = ActivationCheckpointing::none,
    ParamStorage storage = ParamStorage::flat, TensorParallel tp = {});

}  // namespace trainrun
