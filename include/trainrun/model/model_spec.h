// ModelSpec: one model family as the rest of trainrun sees it. From the config alone it builds
// the model, sizes it with the model's own measuring pass (no second copy of the layout), counts
// its FLOPs, advises the plan, and says how `trainrun sample` feeds it a context. The registry
// is keyed by ModelType: a new family is its enum value and name (experiment.h), its model file
// with its spec (its config rules, size bounds and description included), and one entry in
// src/model/model_spec.cpp; config validation, plan and report ask the spec, never the type.
// Thread safety: the specs are immutable; each function may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainrun/core/experiment.h"
#include "trainrun/model/model.h"

namespace trainrun {

// What the measuring pass finds: exactly what build() would allocate.
struct ModelShape {
  int64_t params = 0;
  // Parameters per module, in declaration order: "wte", "blocks.0", ..., "ln_f". A parameter
  // belongs to the module its name starts with, numbered modules ("blocks.3") counted apart.
  std::vector<std::pair<std::string, int64_t>> params_by_module;
  int64_t activation_bytes = 0;  // both arenas, for micro-batches of the measured size
  // Parameters whose gradients are final only when backward ends (reported last through
  // GradReadyFn): their reduction cannot overlap backward. gpt: the embeddings; mlp: all.
  int64_t last_ready_params = 0;
  // Parameters per unit (params.h), in order: what ZeRO-3 gathers at once. gpt and llama: the
  // embeddings, each block, the head; mlp: one unit.
  std::vector<int64_t> unit_params;
};

// A config the family cannot build, said for config validation: the keys at fault and why,
// with the fix.
struct ModelProblem {
  std::vector<std::string_view> keys;
  std::string message;
};

// A tensor's element count, in double: a bound checked before any int64 size arithmetic runs.
struct TensorBound {
  const char* what;  // "attention scores (batch_size x n_head x seq_len^2)"
  double elements;
};

struct ModelSpec {
  ModelType type;
  // The family's config rules (docs/config.md lists `rules`, one sentence): appends a problem
  // for each broken one. Only the configured family's rules run.
  const char* rules;
  void (*validate)(const ModelConfig& cfg, std::vector<ModelProblem>& out);
  // The family's largest tensors for micro-batches of `batch` sequences, beyond the token
  // embedding and the logits that every family has, computed in double from the config alone.
  void (*tensor_bounds)(const ModelConfig& cfg, double batch, std::vector<TensorBound>& out);
  // One line for `trainrun report`: "gpt 2 layers d_model 64 heads 4 seq_len 64 vocab 64".
  std::string (*describe)(const ModelConfig& cfg);
  // Builds, allocates and binds a model for micro-batches of `batch` sequences; `checkpointing`:
  // train.activation_checkpointing (other than none only for a family with blocks: the config
  // rules say);
  // `storage`: external for ZeRO-2/3, which owns the parameters' memory (params.h; only for a
  // family with units, as the config rules say); `tp`: the tensor-parallel group its layers
  // split over (size 1 unless the family has attention blocks, as the config rules say).
  std::unique_ptr<Model> (*build)(const ModelConfig& cfg, Backend& be, int batch, DType dtype,
                                  ActivationCheckpointing checkpointing, ParamStorage storage,
                                  TensorParallel tp);
  // The measuring pass alone: declares every parameter and binds both arenas once, allocating
  // nothing, so it is cheap even for a model that would not fit this machine. `tp` > 1: what
  // one rank of distributed.tp holds (its share of the split layers, the rest whole).
  ModelShape (*measure)(const ModelConfig& cfg, int batch, DType dtype,
                        ActivationCheckpointing checkpointing, int tp);
  // Forward FLOPs per predicted token (the FLOPs model of flops.h).
  double (*forward_flops_per_token)(const ModelConfig& cfg);
  // Predicted tokens per sequence of seq_len inputs.
  int64_t (*targets_per_sequence)(const ModelConfig& cfg);
  // `trainrun plan`'s warnings that are the family's own (shapes the device dislikes), in the
  // order they are appended to `out`. `gpu`: the plan is for a GPU.
  void (*advise)(const ModelConfig& cfg, bool gpu, std::vector<std::string>& out);
  // Sampling: fills `window` (seq_len token ids) with the last min(ctx.size(), seq_len) tokens
  // of `ctx` as the family reads a context, and returns the row of Model::logits() (for a batch
  // of one) that predicts the token after them. `ctx` is not empty.
  int64_t (*place_context)(std::span<const int32_t> ctx, std::span<int32_t> window);
  // The global output widths of one block's column-parallel layers (attention's q|k|v, the
  // MLP's first layer): under tensor parallelism each one's input-gradient all-reduce runs
  // during its weight-gradient GEMM, which `trainrun plan` times. Empty: no such layers.
  std::vector<double> (*column_parallel_outputs)(const ModelConfig& cfg);
};

// The spec of a family; every ModelType has one.
const ModelSpec& model_spec(ModelType type);

}  // namespace trainrun
