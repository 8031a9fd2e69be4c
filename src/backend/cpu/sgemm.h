// Row-major f32 GEMM through oneDNN: C = A op B + beta C, op 'N' or 'T' per operand. Called from
// inside an OpenMP region it runs on the calling thread alone, so a kernel that gives each
// thread its own output block stays race-free and deterministic.
#pragma once

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include <cstdint>
#include <stdexcept>

namespace trainrun::cpu {

inline void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    throw std::runtime_error(fmt::format("dnnl_sgemm({}{}, M={}, N={}, K={}) failed: status {}", ta,
                                         tb, M, N, K, static_cast<int>(st)));
}

}  // namespace trainrun::cpu
