// Export to Hugging Face's layout (hf_export.h), by the table in hf_layout.h.
#include "trainrun/hf/hf_export.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hf_layout.h"
#include "trainrun/core/durable_file.h"
#include "trainrun/core/errors.h"

namespace trainrun {

HfModel to_hf(const Experiment& exp, const CheckpointData& ck, SafeDtype dtype) {
  std::map<std::string, const ParamEntry*> params;
  for (const ParamEntry& p : ck.params) params[p.name] = &p;
  HfModel out;
  const bool untied = params.contains("lm_head.weight");
  for (const HfPiece& piece : hf_layout(exp.model, untied)) {
    auto it = params.find(piece.param);
    if (it == params.end())
      throw CheckpointError(fmt::format("the checkpoint has no parameter {}", piece.param));
    const ParamEntry& p = *it->second;
    const float* at = ck.weights.data() + p.offset;
    const int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    HfTensor t{piece.hf, p.shape, {}};
    switch (piece.kind) {
      case HfPiece::Kind::same:
        t.data.assign(at, at + n);
        break;
      case HfPiece::Kind::transposed: {
        const int64_t rows = p.shape.at(0);
        t.shape = {cols, rows};
        t.data.resize(size_t(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) t.data[size_t(c * rows + r)] = at[r * cols + c];
        break;
      }
      case HfPiece::Kind::rows:
        t.shape = {piece.rows, cols};
        t.data.assign(at + piece.row0 * cols, at + (piece.row0 + piece.rows) * cols);
        break;
    }
    out.tensors.push_back(std::move(t));
  }
  out.config_json =
      hf_config_json(exp.model, untied, dtype == SafeDtype::bf16 ? "bfloat16" : "float32");
  out.generation_config_json = nlohmann::ordered_json{{"do_sample", false}}.dump(2) + "\n";
  return out;
}

void write_hf(const std::string& dir, const HfModel& model, SafeDtype dtype,
              uint64_t max_shard_bytes) {
  std::vector<SafeTensorOut> tensors;
  for (const HfTensor& t : model.tensors) tensors.push_back({t.name, t.shape, t.data.data()});
  write_safetensors_model(dir, tensors, dtype, max_shard_bytes);
  const std::filesystem::path d(dir);
  try {
    write_file_durably((d / "config.json").string(), model.config_json);
    write_file_durably((d / "generation_config.json").string(), model.generation_config_json);
  } catch (const std::exception& e) {
    throw CheckpointWriteError(e.what());
  }
}

}  // namespace trainrun
