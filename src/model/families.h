// What the model families share to make their specs (model_spec.h); private to src/model.
#pragma once

#include <cstddef>

#include "trainrun/model_spec.h"
#include "trainrun/params.h"

namespace trainrun {

// The families, one per model file; model_spec.cpp registers them by ModelType.
extern const ModelSpec kGptSpec;  // gpt.cpp
extern const ModelSpec kMlpSpec;  // mlp_model.cpp

// How far a model's constructor goes: the full build, or only the measuring pass (parameters
// declared, arenas measured, nothing allocated; such a model must never run).
enum class Bind { allocate, measure_only };

// The backend a measuring pass hands its arenas: a CPU backend of which only device() is used.
Backend& measuring_backend();

// The shape of a model after its measuring pass (last_ready_params left to the family).
ModelShape shape_of(const ParamStore& ps, size_t activation_bytes);

}  // namespace trainrun
