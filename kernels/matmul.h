// Dense-layer GEMMs on cuBLASLt (see matmul.cpp). Owns the cuBLASLt handle, its workspace and
// the algorithm chosen for each call shape.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "trainrun/core/tensor.h"

namespace trainrun::cuda {

class Gemm {
 public:
  Gemm();  // throws DeviceError when cublasLtCreate fails (no driver, no GPU)
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[N,OC] = in[N,C] . w[OC,C]^T + bias[OC] (bias may be null)
  void forward(DType dt, void* out, const void* in, const void* w, const void* bias, int64_t N,
               int64_t C, int64_t OC);
  // din[N,C] += dout . w; dw[OC,C] += dout^T . in (either may be null), dw of dtype dw_dt (dt, or
  // f32 beside bf16: the parameter gradient of mixed precision). Either is overwritten instead
  // (GEMM beta 0: never read) when its accumulate flag is false.
  void backward(DType dt, DType dw_dt, void* din, void* dw, const void* dout, const void* in,
                const void* w, int64_t N, int64_t C, int64_t OC, bool din_accumulate,
                bool dw_accumulate);

  // The GELU epilogues. Each returns false, having done nothing, where its layout rules do not
  // hold (a leading dimension not a multiple of 8, a vector less than 16-byte aligned); the
  // caller then runs the unfused ops.
  // pre[N,OC] = in . w^T + bias (bias may be null), out = gelu(pre): GELU_AUX(_BIAS).
  bool forward_gelu(DType dt, void* out, void* pre, const void* in, const void* w, const void* bias,
                    int64_t N, int64_t C, int64_t OC);
  // dpre[N,C] = (dout . w) * gelu'(pre), overwritten: DGELU.
  bool backward_dgelu(DType dt, void* dpre, const void* dout, const void* w, const void* pre,
                      int64_t N, int64_t C, int64_t OC);

  // What cuBLASLt adds to a GEMM's result.
  enum class Epilogue : uint8_t { none, bias, gelu_aux, dgelu };

 private:
  // Column-major D[m,n] = alpha op(A)[m,k] . op(B)[k,n] + beta D, then the epilogue: + bias[m]
  // (bias), aux = that, D = gelu(aux) (gelu_aux, bias optional), D *= gelu'(aux) (dgelu); A and
  // B of dtype dt, D and aux of dtype d_dt (dt, or f32 beside bf16), aux's leading dimension
  // aux_ld.
  void run(DType dt, DType d_dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd, float beta,
           Epilogue epi, const void* bias, const void* aux, int64_t aux_ld, const char* what);

  struct Plans;  // the cuBLASLt descriptors and algorithm of each call shape (matmul.cpp)
  std::unique_ptr<Plans> plans_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool tf32_ = false;
};

}  // namespace trainrun::cuda
