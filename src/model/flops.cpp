#include "trainrun/flops.h"

namespace trainrun {

int64_t parameter_count(const ModelConfig& m) {
  const int64_t C = m.d_model, V = m.vocab_size, T = m.seq_len;
  if (m.type == ModelType::mlp) {
    int64_t n = V * C, in = T * C;
    for (int h : m.hidden) {
      n += in * h + h;
      in = h;
    }
    return n + in * V + V;
  }
  // per block: ln1 (2C) + qkv (3C^2 + 3C) + proj (C^2 + C) + ln2 (2C) + fc (4C^2 + 4C) + proj2
  // (4C^2 + C)
  const int64_t block = 12 * C * C + 13 * C;
  return V * C + T * C + m.n_layer * block + 2 * C;
}

double forward_flops_per_token(const ModelConfig& m) {
  const double C = m.d_model, V = m.vocab_size, T = m.seq_len, L = m.n_layer;
  if (m.type == ModelType::mlp) {
    double f = 0, in = T * C;
    for (int h : m.hidden) {
      f += 2 * in * h;
      in = h;
    }
    return f + 2 * in * V;
  }
  // matmuls: qkv 6C^2, proj 2C^2, fc 8C^2, fc proj 8C^2 per layer; head 2CV; attention 4TC.
  return L * (24 * C * C + 4 * T * C) + 2 * C * V;
}

double train_flops_per_token(const ModelConfig& m) {
  return 3 * forward_flops_per_token(m);
}

int64_t targets_per_sequence(const ModelConfig& m) {
  return m.type == ModelType::mlp ? 1 : m.seq_len;
}

}  // namespace trainrun
