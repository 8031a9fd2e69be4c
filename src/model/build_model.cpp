#include <stdexcept>

#include "trainrun/model.h"

namespace trainrun {

std::unique_ptr<Model> make_gpt(const ModelConfig& cfg, Backend& be, int batch, DType dt);
std::unique_ptr<Model> make_mlp_model(const ModelConfig& cfg, Backend& be, int batch, DType dt);

std::unique_ptr<Model> build_model(const ModelConfig& cfg, Backend& be, int batch, DType dtype) {
  if (cfg.type == ModelType::gpt) return make_gpt(cfg, be, batch, dtype);
  if (cfg.type == ModelType::mlp) return make_mlp_model(cfg, be, batch, dtype);
  throw std::invalid_argument("unknown model.type '" + std::string(enum_name(cfg.type)) + "'");
}

}  // namespace trainrun
