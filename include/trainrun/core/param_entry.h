// ParamEntry: one named tensor's place in the flat parameter buffer. The model declares them
// (ParamStore), checkpoints store them, so the type lives below both.
//
// A tensor-parallel rank holds a part of a parameter (Megatron's column or row split): its local
// tensor is one or more boxes of the global tensor, concatenated, each row-major (one box for a
// split along one dimension, one per block for a fused q|k|v or gate|up split block by block).
// The entry knows the global shape and those boxes, so a checkpoint stores global tensors and
// any layout reads any other's (state_dict.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/core/box.h"

namespace trainrun {

struct ParamEntry {
  std::string name;            // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> shape;  // this rank's (local) tensor
  int64_t offset = 0;          // into the flat buffers
  // The global tensor and the boxes of it this rank holds, in local order; empty: the whole
  // tensor (shape), unsplit.
  std::vector<int64_t> global_shape = {};
  std::vector<Box> pieces = {};
  // Whole here and on the other tensor-parallel ranks, which write it (tp rank 0): this rank
  // reads it from a checkpoint but writes none of it, so the world writes each element once.
  bool tp_copy = false;

  const std::vector<int64_t>& global() const { return pieces.empty() ? shape : global_shape; }
};

// A box of the global tensor and where its first element is in the local tensor's flat order.
struct PlacedBox {
  Box box;
  int64_t local = 0;
};

// The boxes of the global tensor that hold the local flat elements [begin, end) of `p` (0 is the
// parameter's first element), in local order; each is one contiguous run of the local tensor.
std::vector<PlacedBox> held_boxes(const ParamEntry& p, int64_t begin, int64_t end);

}  // namespace trainrun
