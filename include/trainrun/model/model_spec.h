// ModelSpec: one model family as the rest of trainrun sees it. From the config alone it builds
// the model, sizes it with the model's own measuring pass (no second copy of the layout), counts
// its FLOPs, advises the plan, and says how `trainrun sample` feeds it a context. The registry
// is keyed by ModelType: a new family is its enum value and name (experiment.h), its model file
// with its spec, and one entry in src/model/model_spec.cpp (plus its rules in config/validate).
// Thread safety: the specs are immutable; each function may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
};

struct ModelSpec {
  ModelType type;
  // Builds, allocates and binds a model for micro-batches of `batch` sequences.
  std::unique_ptr<Model> (*build)(const ModelConfig& cfg, Backend& be, int batch, DType dtype);
  // The measuring pass alone: declares every parameter and binds both arenas once, allocating
  // nothing, so it is cheap even for a model that would not fit this machine.
  ModelShape (*measure)(const ModelConfig& cfg, int batch, DType dtype);
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
};

// The spec of a family; every ModelType has one.
const ModelSpec& model_spec(ModelType type);

}  // namespace trainrun
