// Dense-layer GEMMs through cuBLASLt. Our tensors are row-major; cuBLASLt is column-major, and a
// row-major [R,K] matrix is the same memory as a column-major [K,R] one. So:
//   forward  out[N,OC] = in . w^T + bias   ->  out^T (OC x N) = op_T(w: C x OC) . (in: C x N)
//            with CUBLASLT_EPILOGUE_BIAS adding bias[OC] to every column of out^T.
//   din[N,C]  += dout . w                  ->  din^T (C x N) = (w: C x OC) . (dout: OC x N)
//   dw[OC,C]  += dout^T . in               ->  dw^T (C x OC) = (in: C x N) . op_T(dout: OC x N)
// Backward GEMMs run with beta = 1 where gradients accumulate (backend.h), beta = 0 where they
// are overwritten (GradWrite::overwrite: D is then never read, so it needs no zero fill). dbias
// is a separate deterministic column-sum kernel (BGRADB's sum order is cuBLASLt's own).
//
// Precision: fp32 tensors use CUBLAS_COMPUTE_32F (true fp32, no TF32) so results match the CPU
// reference to ~1e-6 relative; TRAINRUN_CUDA_TF32=1 switches fp32 GEMMs to
// CUBLAS_COMPUTE_32F_FAST_TF32 (about 8x the rate on H100, ~1e-3 relative error). bf16 tensors
// use bf16 inputs/outputs with fp32 accumulation and fp32 alpha/beta, bias in bf16.
//
// cuBLASLt's heuristics assume 256-byte aligned pointers unless told otherwise; views into the
// flat parameter buffer can be less aligned, so each call states the real alignment.
//
// The algorithm is chosen once per call shape: the descriptors and the heuristic's choice are
// kept (Gemm::Plans) under a key of everything the choice depends on, dtypes, transposes, sizes,
// leading dimensions, the epilogue and the pointers' alignments (the heuristic assumes the
// alignment it was told, and for the bias the alignment of the pointer it saw). A step then sets
// only the bias pointer and calls cublasLtMatmul: creating four descriptors and running the
// heuristic cost tens of microseconds of host time per GEMM, about 150 GEMMs a GPT-2 micro-batch.
// The shapes are few (a model's layers repeat them), so the cache is not bounded.
#include "matmul.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "launch.h"
#include "trainrun/core/errors.h"
#include "trainrun/core/rng.h"

namespace trainrun::cuda {

// The plan cache's types: named (not anonymous) because Gemm::Plans holds them.
namespace gemm_plan {

// RAII for the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Descs() = default;
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Everything the descriptors and the heuristic's choice depend on.
struct PlanKey {
  DType dt, d_dt;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldd;
  uint32_t align_a, align_b, align_d, align_bias;  // align_bias 0: no bias
  Gemm::Epilogue epi;
  uint32_t align_aux;  // 0: no aux matrix
  int64_t aux_ld;

  bool operator==(const PlanKey&) const = default;
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.dt) | static_cast<uint64_t>(k.d_dt) << 8 |
                 static_cast<uint64_t>(k.trans_a) << 16 | static_cast<uint64_t>(k.trans_b) << 17;
    for (const int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldd})
      h = hash_combine(h, static_cast<uint64_t>(v));
    h = hash_combine(h, static_cast<uint64_t>(k.aux_ld));
    h = hash_combine(h, static_cast<uint64_t>(k.epi) | static_cast<uint64_t>(k.align_aux) << 16);
    return hash_combine(
        h, static_cast<uint64_t>(k.align_a) | static_cast<uint64_t>(k.align_b) << 16 |
               static_cast<uint64_t>(k.align_d) << 32 | static_cast<uint64_t>(k.align_bias) << 48);
  }
};

}  // namespace gemm_plan

using gemm_plan::Descs;
using gemm_plan::PlanKey;

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

// The descriptors of one call shape and the heuristic's algorithm for them. The bias pointer
// is set before the heuristic runs, which assumes its alignment (kernels/sim/cublaslt.cpp).
void plan(cublasLtHandle_t handle, size_t workspace_bytes, bool tf32, const PlanKey& key,
          const void* bias, const void* aux, Descs& ds, const char* what) {
  const cudaDataType_t type = key.dt == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t d_type = key.d_dt == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cublasComputeType_t compute =
      (key.dt == DType::f32 && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&ds.op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate", what);
  const cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
        "set TRANSA", what);
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
        "set TRANSB", what);
  using E = Gemm::Epilogue;
  const cublasLtEpilogue_t epi = key.epi == E::bias       ? CUBLASLT_EPILOGUE_BIAS
                                 : key.epi == E::gelu_aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                                  : CUBLASLT_EPILOGUE_GELU_AUX)
                                 : key.epi == E::dgelu    ? CUBLASLT_EPILOGUE_DGELU
                                                          : CUBLASLT_EPILOGUE_DEFAULT;
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
        "set EPILOGUE", what);
  if (bias) {
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias)),
          "set BIAS_POINTER", what);
    const cudaDataType_t bias_type = type;
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof(bias_type)),
          "set BIAS_DATA_TYPE", what);
  }
  if (aux) {
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                         sizeof(aux)),
          "set EPILOGUE_AUX_POINTER", what);
    check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &key.aux_ld,
                                         sizeof(key.aux_ld)),
          "set EPILOGUE_AUX_LD", what);
  }
  // Stored shapes (column-major rows x cols) before op(): A is m x k, or k x m when transposed.
  const uint64_t a_rows = static_cast<uint64_t>(key.trans_a ? key.k : key.m);
  const uint64_t a_cols = static_cast<uint64_t>(key.trans_a ? key.m : key.k);
  const uint64_t b_rows = static_cast<uint64_t>(key.trans_b ? key.n : key.k);
  const uint64_t b_cols = static_cast<uint64_t>(key.trans_b ? key.k : key.n);
  check(cublasLtMatrixLayoutCreate(&ds.a, type, a_rows, a_cols, key.lda), "layout A", what);
  check(cublasLtMatrixLayoutCreate(&ds.b, type, b_rows, b_cols, key.ldb), "layout B", what);
  check(cublasLtMatrixLayoutCreate(&ds.d, d_type, static_cast<uint64_t>(key.m),
                                   static_cast<uint64_t>(key.n), key.ldd),
        "layout D", what);

  check(cublasLtMatmulPreferenceCreate(&ds.pref), "cublasLtMatmulPreferenceCreate", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        "set MAX_WORKSPACE_BYTES", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &key.align_a, sizeof(key.align_a)),
        "set alignment A", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &key.align_b, sizeof(key.align_b)),
        "set alignment B", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &key.align_d, sizeof(key.align_d)),
        "set alignment C", what);
  check(cublasLtMatmulPreferenceSetAttribute(ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &key.align_d, sizeof(key.align_d)),
        "set alignment D", what);

  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref, 1, &heur,
                                       &found),
        "cublasLtMatmulAlgoGetHeuristic", what);
  if (found == 0)
    throw DeviceError(
        std::string(what) + ": cuBLASLt has no algorithm for m=" + std::to_string(key.m) +
        " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k) + " " + dtype_name(key.dt));
  ds.algo = heur.algo;
}

}  // namespace

struct Gemm::Plans {
  std::unordered_map<PlanKey, std::unique_ptr<Descs>, gemm_plan::PlanKeyHash> by_key;
};

Gemm::Gemm() : plans_(std::make_unique<Plans>()) {
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
  plans_.reset();  // the descriptors before the handle
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

void Gemm::run(DType dt, DType d_dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
               const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd,
               float beta, Epilogue epi, const void* bias, const void* aux, int64_t aux_ld,
               const char* what) {
  if (dt != DType::f32 && dt != DType::bf16)
    throw DeviceError(std::string(what) + ": the CUDA backend's GEMMs take f32 or bf16, not " +
                      dtype_name(dt));
  if (d_dt != dt && !(d_dt == DType::f32 && dt == DType::bf16))
    throw DeviceError(std::string(what) + ": a " + dtype_name(d_dt) + " result of " +
                      dtype_name(dt) + " inputs (f32 beside bf16 only)");
  PlanKey key{dt, d_dt, trans_a, trans_b, m, n, k, lda, ldb, ldd, 0, 0, 0, 0, epi, 0, 0};
  key.align_a = alignment_of(A);
  key.align_b = alignment_of(B);
  key.align_d = alignment_of(D);
  key.align_bias = bias ? alignment_of(bias) : 0;
  key.align_aux = aux ? alignment_of(aux) : 0;
  key.aux_ld = aux ? aux_ld : 0;
  std::unique_ptr<Descs>& slot = plans_->by_key[key];
  if (!slot) {
    auto ds = std::make_unique<Descs>();
    plan(handle_, workspace_bytes_, tf32_, key, bias, aux, *ds, what);
    slot = std::move(ds);
  } else {  // the vectors of this call, at the alignments the plan was made for
    if (bias)
      check(cublasLtMatmulDescSetAttribute(slot->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof(bias)),
            "set BIAS_POINTER", what);
    if (aux)
      check(cublasLtMatmulDescSetAttribute(slot->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                           &aux, sizeof(aux)),
            "set EPILOGUE_AUX_POINTER", what);
  }
  const Descs& ds = *slot;
  const float alpha = 1.0f;
  check(cublasLtMatmul(handle_, ds.op, &alpha, A, ds.a, B, ds.b, &beta, D, ds.d, D, ds.d, &ds.algo,
                       workspace_, workspace_bytes_, /*stream=*/nullptr),
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
      /*ldb=*/C, out, /*ldd=*/OC, /*beta=*/0.0f, epilogue_bias ? Epilogue::bias : Epilogue::none,
      epilogue_bias ? bias : nullptr, nullptr, 0, "matmul");
  if (bias && !epilogue_bias) add_bias(dt, out, bias, N, OC);
}

// The aux matrix's rules (kernels/sim/cublaslt.cpp): EPILOGUE_AUX_LD a multiple of 8, and the
// epilogue's 16-byte vector loads.
bool Gemm::forward_gelu(DType dt, void* out, void* pre, const void* in, const void* w,
                        const void* bias, int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || OC <= 0 || OC % 8 != 0 || alignment_of(pre) < kBiasAlignment ||
      (bias && alignment_of(bias) < kBiasAlignment))
    return false;
  run(dt, dt, true, false, /*m=*/OC, /*n=*/N, /*k=*/C, w, /*lda=*/C, in, /*ldb=*/C, out,
      /*ldd=*/OC, 0.0f, Epilogue::gelu_aux, bias, pre, /*aux_ld=*/OC, "matmul_gelu");
  return true;
}

bool Gemm::backward_dgelu(DType dt, void* dpre, const void* dout, const void* w, const void* pre,
                          int64_t N, int64_t C, int64_t OC) {
  if (N <= 0 || C <= 0 || OC <= 0 || C % 8 != 0 || alignment_of(pre) < kBiasAlignment) return false;
  run(dt, dt, false, false, /*m=*/C, /*n=*/N, /*k=*/OC, w, /*lda=*/C, dout, /*ldb=*/OC, dpre,
      /*ldd=*/C, 0.0f, Epilogue::dgelu, nullptr, pre, /*aux_ld=*/C, "matmul_backward_gelu (din)");
  return true;
}

void Gemm::backward(DType dt, DType dw_dt, void* din, void* dw, const void* dout, const void* in,
                    const void* w, int64_t N, int64_t C, int64_t OC, bool din_accumulate,
                    bool dw_accumulate) {
  if (N <= 0 || C <= 0 || OC <= 0) return;
  if (din)
    run(dt, dt, false, false, /*m=*/C, /*n=*/N, /*k=*/OC, w, /*lda=*/C, dout, /*ldb=*/OC, din,
        /*ldd=*/C, din_accumulate ? 1.0f : 0.0f, Epilogue::none, nullptr, nullptr, 0,
        "matmul_backward (din)");
  if (dw)
    run(dt, dw_dt, false, true, /*m=*/C, /*n=*/OC, /*k=*/N, in, /*lda=*/C, dout, /*ldb=*/OC, dw,
        /*ldd=*/C, dw_accumulate ? 1.0f : 0.0f, Epilogue::none, nullptr, nullptr, 0,
        "matmul_backward (dw)");
}

}  // namespace trainrun::cuda
