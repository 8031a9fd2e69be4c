// What the model families share to make their specs (model_spec.h); private to src/model.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "trainrun/model/model_spec.h"
#include "trainrun/model/params.h"

namespace trainrun {

// The families, one per model file; model_spec.cpp registers them by ModelType.
extern const ModelSpec kGptSpec;    // gpt.cpp
extern const ModelSpec kMlpSpec;    // mlp_model.cpp
extern const ModelSpec kLlamaSpec;  // llama.cpp

// How far a model's constructor goes: the full build, or only the measuring pass (parameters
// declared, arenas measured, nothing allocated; such a model must never run).
enum class Bind { allocate, measure_only };

// The backend a measuring pass hands its arenas: a CPU backend of which only device() is used.
Backend& measuring_backend();

// The shape of a model after its measuring pass (last_ready_params left to the family).
ModelShape shape_of(const ParamStore& ps, size_t activation_bytes);

// A model's set_batch: the host token ids x and targets y (ids.numel() each) to the device.
void copy_batch(Backend& be, Tensor ids, Tensor targets, const int32_t* x, const int32_t* y);

// The causal families' place_context: the context at positions 0..n-1 (the padding after it is
// never seen); returns the row of the last context token.
int64_t place_causal_context(std::span<const int32_t> ctx, std::span<int32_t> window);

// The attention families' rule: d_model splits evenly into n_head heads.
void heads_divide_width(const ModelConfig& m, std::vector<ModelProblem>& out);
// The attention families' largest tensors: the blocks' parameters (about n_layer x 12 d_model^2)
// and the attention scores (batch x n_head x seq_len^2).
void attention_bounds(const ModelConfig& m, double batch, std::vector<TensorBound>& out);
// "gpt 2 layers d_model 64 heads 4 seq_len 64 vocab 64"
std::string describe_transformer(const ModelConfig& m);

// The attention families' plan advice: a head dimension tensor cores dislike (on a GPU), and
// an attention share (attention_flops of forward_flops, per token) that dominates.
void advise_attention(const ModelConfig& m, bool gpu, double attention_flops, double forward_flops,
                      std::vector<std::string>& out);

}  // namespace trainrun
