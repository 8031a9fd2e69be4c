// ParamEntry: one named tensor's place in the flat parameter buffer. The model declares them
// (ParamStore), checkpoints store them, so the type lives below both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainrun {

struct ParamEntry {
  std::string name;  // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the flat buffers
};

}  // namespace trainrun
