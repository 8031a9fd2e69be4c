// Document masking's one rule, shared by the CPU ops and the CUDA kernels (TRAINRUN_HD): with
// doc_start [B,T] (i32, the first position of the document each position is in), query t of row
// b sees keys j in [first_key, t] and sits at position t - first_key for the position encodings.
// Without doc_start (nullptr) a row is one document: first_key = 0, position t. The value is
// clamped into [0, t], so a malformed doc_start on the device can never read outside the row
// (the public op checks it when it is host memory). document_starts derives doc_start from
// token ids.
#pragma once

#include <cstdint>

#include "trainrun/core/host_device.h"

namespace trainrun {

TRAINRUN_HD inline int64_t first_key(const int32_t* doc_start, int64_t b, int64_t T, int64_t t) {
  if (doc_start == nullptr) return 0;
  const int64_t s = doc_start[b * T + t];
  return s < 0 ? 0 : s > t ? t : s;
}

// doc_start of token ids x [B,T] packed with `eot` between documents: each row starts a document
// at 0 and after every eot, which closes the document before it (it is that document's last
// token, as in Megatron-LM's reset attention masks and positions).
inline void document_starts(const int32_t* x, int64_t B, int64_t T, int32_t eot, int32_t* out) {
  for (int64_t b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0 && x[b * T + t - 1] == eot) start = static_cast<int32_t>(t);
      out[b * T + t] = start;
    }
  }
}

}  // namespace trainrun
