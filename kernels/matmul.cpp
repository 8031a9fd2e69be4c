// Dense-layer GEMMs through cuBLASLt. Our tensors are row-major; cuBLASLt is column-major, and a
// row-major [R,K] matrix is the same memory as a column-major [K,R] one. So:
//   forward  out[N,OC] = in . w^T + bias   ->  out^T (OC x N) = op_T(w: C x OC) . (in: C x N)
//            with CUBLASLT_EPILOGUE_BIAS adding bias[OC] to every column of out^T.
//   din[N,C]  += dout . w                  ->  din^T (C x N) = (w: C x OC) . (dout: OC x N)
//   dw[OC,C]  += dout^T . in               ->  dw^T (C x OC) = (in: C x N) . op_T(dout: OC x N)
// Backward GEMMs run with beta = 1 because gradients accumulate (backend.h). dbias is a separate
// deterministic column-sum kernel (the BGRADB epilogue overwrites instead of accumulating).
//
// Precision: fp32 tensors use CUBLAS_COMPUTE_32F (true fp32, no TF32) so results match the CPU
// reference to ~1e-6 relative; TRAINRUN_CUDA_TF32=1 switches fp32 GEMMs to
// CUBLAS_COMPUTE_32F_FAST_TF32 (about 8x the rate on H100, ~1e-3 relative error). bf16 tensors
// use bf16 inputs/outputs with fp32 accumulation and fp32 alpha/beta, bias in bf16.
//
// cuBLASLt's heuristics assume 256-byte aligned pointers unless told otherwise; views into the
// flat parameter buffer can be less aligned, so each call states the real alignment.
#include "matmul.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "launch.h"
#include "trainrun/core/errors.h"

namespace trainrun::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS recommends for Hopper
constexpr uint32_t kBiasAlignment = 16;  // the epilogue's vector loads (kernels/sim/cublaslt.cpp)

void check(cublasStatus_t st, const char* call, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string(what) + ": " + call + " failed: " + cublasLtGetStatusName(st) +
                      " (" + cublasLtGetStatusString(st) + ")");
}

uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align /= 2;
  return align;
}

// RAII for the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Gemm::Gemm() {
  check(cublasLtCreate(&handle_), "cublasLtCreate", "cuBLASLt");
  const cudaError_t e = cudaMalloc(&workspace_, kWorkspaceBytes);
  if (e != cudaSuccess) {
    cublasLtDestroy(handle_);
    throw DeviceError(std::string("cuBLASLt workspace: cudaMalloc failed: ") +
                      cudaGetErrorString(e));
  }
  workspace_bytes_ = kWorkspaceBytes;
  const char* tf32 = std::getenv("TRAINRUN_CUDA_TF32");
  tf32_ = tf32 && std::strcmp(tf32, "1") == 0;
}

Gemm::~Gemm() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::run(DType dt, DType d_dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd,
               float beta, const void* bias, const char* what) {
  if (dt != DType::f32 && dt != DType::bf16)
    throw DeviceError(std::string(what) + ": the CUDA backend's GEMMs take f32 or bf16, not " +
                      dtype_name(dt));
  if (d_dt != dt && !(d_dt == DType::f32 && dt == DType::bf16))
    throw DeviceError(std::string(what) + ": a " + dtype_name(d_dt) + " result of " +
                      dtype_name(dt) + " inputs (f32 beside bf16 only)");
  const cudaDataType_t type = dt == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t d_type = d_dt == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasComputeType_t compute =
      (dt == DType::f32 && tf32_) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Descs ds;
  check(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate", what);
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
        "set TRANSA", what);
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
        "set TRANSB", what);
  if (bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
          "set EPILOGUE", what);
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "set BIAS_POINTER", what);
    const cudaDataType_t bias_type = type;
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof(bias_type)),
          "set BIAS_DATA_TYPE", what);
  }
  // Stored shapes (column-major rows x cols) before op(): A is m x k, or k x m when transposed.
  const uint64_t a_rows = static_cast<uint64_t>(trans_a ? k : m);
  const uint64_t a_cols = static_cast<uint64_t>(trans_a ? m : k);
  const uint64_t b_rows = static_cast<uint64_t>(trans_b ? n : k);
  const uint64_t b_cols = static_cast<uint64_t>(trans_b ? k : n);
  check(cublasLtMatrixLayoutCreate(&ds.a, type, a_rows, a_cols, lda), "layout A", what);
  check(cublasLtMatrixLayoutCreate(&ds.b, type, b_rows, b_cols, ldb), "layout B", what);
  check(cublasLtMatrixLayoutCreate(&ds.d, d_type, static_cast<uint64_t>(m),
                                   static_cast<uint64_t>(n), ldd),
        "layout D", what);

  check(cublasLtMatmulPreferenceCreate(&ds.pref), "cublasLtMatmulPreferenceCreate", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes_, sizeof(workspace_bytes_)),
        "set MAX_WORKSPACE_BYTES", what);
  const uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_d = alignment_of(D);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof(al_a)),
        "set alignment A", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof(al_b)),
        "set alignment B", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_d, sizeof(al_d)),
        "set alignment C", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_d, sizeof(al_d)),
        "set alignment D", what);

  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle_, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &heur,
                                       &found),
        "cublasLtMatmulAlgoGetHeuristic", what);
  if (found == 0)
    throw DeviceError(std::string(what) + ": cuBLASLt has no algorithm for m=" + std::to_string(m) +
                      " n=" + std::to_string(n) + " k=" + std::to_string(k) + " " + dtype_name(dt));
  const float alpha = 1.0f;
  check(cublasLtMatmul(handle_, ds.op, &alpha, A, ds.a, B, ds.b, &beta, D, ds.d, D, ds.d,
                       &heur.algo, workspace_, workspace_bytes_, /*stream=*/nullptr),
        "cublasLtMatmul", what);
}

void Gemm::forward(DType dt, void* out, const void* in, const void* w, const void* bias, int64_t N,
                   int64_t C, int64_t OC) {
  if (N <= 0 || OC <= 0) return;
  // The bias epilogue reads the bias vector with 16-byte loads; a bias in the packed parameter
  // buffer sits at any 4-byte offset (d_model 57, say), where it would fault with "misaligned
  // address". Such a bias is added by a kernel of ours after the GEMM instead.
  const bool epilogue_bias = bias && alignment_of(bias) >= kBiasAlignment;
  run(dt, dt, /*trans_a=*/true, /*trans_b=*/false, /*m=*/OC, /*n=*/N, /*k=*/C, w, /*lda=*/C, in,
      /*ldb=*/C, out, /*ldd=*/OC, /*beta=*/0.0f, epilogue_bias ? bias : nullptr, "matmul");
  if (bias && !epilogue_bias) add_bias(dt, out, bias, N, OC);
}

void Gemm::backward(DType dt, DType dw_dt, void* din, void* dw, const void* dout, const void* in,
                    const void* w, int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || C <= 0 || OC <= 0) return;
  if (din)
    run(dt, dt, false, false, /*m=*/C, /*n=*/N, /*k=*/OC, w, /*lda=*/C, dout, /*ldb=*/OC, din,
        /*ldd=*/C, 1.0f, nullptr, "matmul_backward (din)");
  run(dt, dw_dt, false, true, /*m=*/C, /*n=*/OC, /*k=*/N, in, /*lda=*/C, dout, /*ldb=*/OC, dw,
      /*ldd=*/C, 1.0f, nullptr, "matmul_backward (dw)");
}

}  // namespace trainrun::cuda
