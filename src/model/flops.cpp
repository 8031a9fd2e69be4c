// The FLOPs model's entry points: each family states its own counts in its spec.
#include "trainrun/model/flops.h"

#include "trainrun/model/model_spec.h"

namespace trainrun {

int64_t parameter_count(const ModelConfig& m) {
  return model_spec(m.type).measure(m, 1, DType::f32, ActivationCheckpointing::none, 1).params;
}

double forward_flops_per_token(const ModelConfig& m) {
  return model_spec(m.type).forward_flops_per_token(m);
}

double train_flops_per_token(const ModelConfig& m) {
  return 3 * forward_flops_per_token(m);
}

int64_t targets_per_sequence(const ModelConfig& m) {
  return model_spec(m.type).targets_per_sequence(m);
}

}  // namespace trainrun
