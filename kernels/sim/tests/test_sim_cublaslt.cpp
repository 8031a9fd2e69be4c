// The sim's cuBLASLt (kernels/sim/cublaslt.cpp) through its own API, against a naive column-major
// reference written here independently: every transpose on odd shapes with ld > rows,
// accumulation into D passed as C, the epilogues, bf16 and TF32 rounding, and the refusals a GPU
// would make (under-aligned pointers, memory outside any device allocation, bad descriptors).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace {

// Device memory from the sim runtime, freed with the object.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&p_, bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get(size_t byte_offset = 0) const { return static_cast<char*>(p_) + byte_offset; }

 private:
  void* p_ = nullptr;
};

size_t size_of(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

// Host floats (exact in `t`) to device storage of type `t`, and back.
void upload(void* dst, const std::vector<float>& v, cudaDataType_t t) {
  std::vector<unsigned char> bytes(v.size() * size_of(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == CUDA_R_32F) {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    } else {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  REQUIRE(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess);
}

std::vector<float> download(const void* src, size_t count, cudaDataType_t t) {
  std::vector<unsigned char> bytes(count * size_of(t));
  REQUIRE(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    if (t == CUDA_R_32F) {
      std::memcpy(&v[i], bytes.data() + 4 * i, 4);
    } else {
      __nv_bfloat16 h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = __bfloat162float(h);
    }
  }
  return v;
}

// Deterministic values in [-1, 1) with full fp32 mantissas, rounded to bf16 when stored as bf16
// so that the host copy is exactly what the device holds.
std::vector<float> values(size_t count, uint32_t seed, cudaDataType_t t) {
  std::vector<float> v(count);
  uint32_t s = seed * 2654435761u + 1u;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
    if (t == CUDA_R_16BF) x = __bfloat162float(__float2bfloat16_rn(x));
  }
  return v;
}

// One cublasLtMatmul as matmul.cpp makes it: descriptors, preference, heuristic, call.
struct Gemm {
  cudaDataType_t ab = CUDA_R_32F, cd = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool ta = false, tb = false;
  uint64_t m = 5, n = 7, k = 3;
  int64_t lda = 0, ldb = 0, ldd = 0;  // 0: the stored rows + 2
  float alpha = 1.0f, beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::optional<cudaDataType_t> bias_type;  // unset: the documented default, D's type
  const void* aux = nullptr;
  int64_t aux_ld = 0;
  uint32_t align_a = 0;  // MIN_ALIGNMENT_A_BYTES; 0 leaves the default (256)

  uint64_t a_rows() const { return ta ? k : m; }
  uint64_t a_cols() const { return ta ? m : k; }
  uint64_t b_rows() const { return tb ? n : k; }
  uint64_t b_cols() const { return tb ? k : n; }
  int64_t ld_a() const { return lda ? lda : static_cast<int64_t>(a_rows()) + 2; }
  int64_t ld_b() const { return ldb ? ldb : static_cast<int64_t>(b_rows()) + 2; }
  int64_t ld_d() const { return ldd ? ldd : static_cast<int64_t>(m) + 2; }
  size_t a_count() const { return static_cast<size_t>(ld_a()) * a_cols(); }
  size_t b_count() const { return static_cast<size_t>(ld_b()) * b_cols(); }
  size_t d_count() const { return static_cast<size_t>(ld_d()) * n; }

  cublasStatus_t run(const void* A, const void* B, const void* C, void* D) const {
    cublasLtHandle_t h = nullptr;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasStatus_t st = steps(h, op, la, lb, lc, ld, pref, A, B, C, D);
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
    if (h) cublasLtDestroy(h);
    return st;
  }

 private:
  cublasStatus_t steps(cublasLtHandle_t& h, cublasLtMatmulDesc_t& op, cublasLtMatrixLayout_t& la,
                       cublasLtMatrixLayout_t& lb, cublasLtMatrixLayout_t& lc,
                       cublasLtMatrixLayout_t& ld, cublasLtMatmulPreference_t& pref, const void* A,
                       const void* B, const void* C, void* D) const {
#define GEMM_TRY(expr) \
  if (const cublasStatus_t s_ = (expr); s_ != CUBLAS_STATUS_SUCCESS) return s_
    GEMM_TRY(cublasLtCreate(&h));
    GEMM_TRY(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                            sizeof epilogue));
    if (bias)
      GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    if (bias_type)
      GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &*bias_type,
                                              sizeof *bias_type));
    if (aux) {
      GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                              sizeof aux));
      GEMM_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                              sizeof aux_ld));
    }
    GEMM_TRY(cublasLtMatrixLayoutCreate(&la, ab, a_rows(), a_cols(), ld_a()));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&lb, ab, b_rows(), b_cols(), ld_b()));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&lc, cd, m, n, ld_d()));
    GEMM_TRY(cublasLtMatrixLayoutCreate(&ld, cd, m, n, ld_d()));
    GEMM_TRY(cublasLtMatmulPreferenceCreate(&pref));
    if (align_a)
      GEMM_TRY(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    GEMM_TRY(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, ld, pref, 1, &heur, &found));
    REQUIRE(found == 1);
    return cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, C, lc, D, ld, &heur.algo, nullptr, 0,
                          nullptr);
#undef GEMM_TRY
  }
};

// Column-major reference: x(i, j) = alpha sum_q op(A)(i, q) op(B)(q, j) + beta C(i, j), in double;
// C (ld = ld_d) is read only when beta != 0. Returned dense, m x n, column-major.
std::vector<double> reference(const Gemm& g, const std::vector<float>& A,
                              const std::vector<float>& B, const std::vector<float>& C = {}) {
  std::vector<double> x(g.m * g.n);
  for (uint64_t j = 0; j < g.n; ++j)
    for (uint64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (uint64_t q = 0; q < g.k; ++q) {
        const double a = g.ta ? A[q + i * g.ld_a()] : A[i + q * g.ld_a()];
        const double b = g.tb ? B[j + q * g.ld_b()] : B[q + j * g.ld_b()];
        acc += a * b;
      }
      x[i + j * g.m] = g.alpha * acc + (g.beta != 0 ? g.beta * C[i + j * g.ld_d()] : 0.0);
    }
  return x;
}

// D (as downloaded, ld = ld_d) against a dense reference: relative to the largest |reference|.
void check_close(const Gemm& g, const std::vector<float>& D, const std::vector<double>& ref,
                 double rel) {
  double scale = 1e-30;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (uint64_t j = 0; j < g.n; ++j)
    for (uint64_t i = 0; i < g.m; ++i) {
      INFO("i=" << i << " j=" << j);
      CHECK(std::abs(D[i + j * g.ld_d()] - ref[i + j * g.m]) <= rel * scale);
    }
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double th = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// Runs g on fresh device copies of A and B; returns D (D starts as C when beta != 0).
std::vector<float> run_checked(const Gemm& g, const std::vector<float>& A,
                               const std::vector<float>& B, const std::vector<float>& C = {}) {
  DeviceBuffer da(g.a_count() * size_of(g.ab)), db(g.b_count() * size_of(g.ab)),
      dd(g.d_count() * size_of(g.cd));
  upload(da.get(), A, g.ab);
  upload(db.get(), B, g.ab);
  if (!C.empty()) upload(dd.get(), C, g.cd);
  REQUIRE(g.run(da.get(), db.get(), dd.get(), dd.get()) == CUBLAS_STATUS_SUCCESS);
  return download(dd.get(), g.d_count(), g.cd);
}

}  // namespace

// The defaults below (MIN_ALIGNMENT_*_BYTES = 256) hold only for what CUDA guarantees of
// cudaMalloc: "any address ... returned by one of the memory allocation routines from the driver
// or runtime API is always aligned to at least 256 bytes" (CUDA C++ Programming Guide).
TEST_CASE("sim cuBLASLt: cudaMalloc blocks are 256-byte aligned, as the defaults assume") {
  DeviceBuffer b(3);
  CHECK(reinterpret_cast<uintptr_t>(b.get()) % 256 == 0);
}

TEST_CASE(
    "sim cuBLASLt: every transpose combination matches the reference (odd shapes, ld > rows)") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Gemm g;
      g.ta = ta;
      g.tb = tb;
      g.alpha = 1.5f;
      const auto A = values(g.a_count(), 1, g.ab), B = values(g.b_count(), 2, g.ab);
      check_close(g, run_checked(g, A, B), reference(g, A, B), 1e-6);
    }
}

TEST_CASE("sim cuBLASLt: beta = 1 with C == D accumulates into D") {
  Gemm g;
  g.ta = true;  // the shape of matmul.cpp's forward; backward (N,N and N,T) is covered above
  g.beta = 1.0f;
  const auto A = values(g.a_count(), 3, g.ab), B = values(g.b_count(), 4, g.ab);
  const auto C = values(g.d_count(), 5, g.cd);
  check_close(g, run_checked(g, A, B, C), reference(g, A, B, C), 1e-6);
}

TEST_CASE("sim cuBLASLt: the bias epilogue adds bias[row] to every column") {
  Gemm g;
  g.ta = true;
  g.epilogue = CUBLASLT_EPILOGUE_BIAS;
  const auto A = values(g.a_count(), 6, g.ab), B = values(g.b_count(), 7, g.ab);
  const auto bias = values(g.m, 8, g.cd);
  DeviceBuffer dbias(g.m * 4);
  upload(dbias.get(), bias, g.cd);
  g.bias = dbias.get();
  auto ref = reference(g, A, B);
  for (uint64_t j = 0; j < g.n; ++j)
    for (uint64_t i = 0; i < g.m; ++i) ref[i + j * g.m] += bias[i];
  check_close(g, run_checked(g, A, B), ref, 1e-6);
  CHECK(download(dbias.get(), g.m, g.cd) == bias);  // an input: only *BGRAD* epilogues write it
}

TEST_CASE("sim cuBLASLt: bf16 in and out, rounded to nearest even once") {
  SUBCASE("a general product matches the reference rounded to bf16") {
    Gemm g;
    g.ab = g.cd = CUDA_R_16BF;
    g.tb = true;
    const auto A = values(g.a_count(), 9, g.ab), B = values(g.b_count(), 10, g.ab);
    const auto D = run_checked(g, A, B);
    const auto ref = reference(g, A, B);
    for (uint64_t j = 0; j < g.n; ++j)
      for (uint64_t i = 0; i < g.m; ++i)
        CHECK(D[i + j * g.ld_d()] ==
              __bfloat162float(__float2bfloat16_rn(static_cast<float>(ref[i + j * g.m]))));
  }
  SUBCASE("ties go to the even mantissa") {
    // 1 x 1 x 1 with A = B = 1: D = alpha exactly, halfway between two bf16 values.
    Gemm g;
    g.ab = g.cd = CUDA_R_16BF;
    g.m = g.n = g.k = 1;
    g.alpha = 1.0f + 0x1p-8f;  // between 1 (even) and 1 + 2^-7 (odd): to 1
    CHECK(run_checked(g, {1.0f, 0, 0}, {1.0f, 0, 0})[0] == 1.0f);
    g.alpha = 1.0f + 3 * 0x1p-8f;  // between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
    CHECK(run_checked(g, {1.0f, 0, 0}, {1.0f, 0, 0})[0] == 1.0f + 0x1p-6f);
  }
}

TEST_CASE("sim cuBLASLt: f32 C/D with bf16 A/B keeps the fp32 accumulation") {
  Gemm g;
  g.ab = CUDA_R_16BF;
  g.cd = CUDA_R_32F;
  g.ta = true;
  g.beta = 1.0f;
  const auto A = values(g.a_count(), 11, g.ab), B = values(g.b_count(), 12, g.ab);
  const auto C = values(g.d_count(), 13, g.cd);
  check_close(g, run_checked(g, A, B, C), reference(g, A, B, C), 1e-6);
}

TEST_CASE("sim cuBLASLt: CUBLAS_COMPUTE_32F_FAST_TF32 rounds A and B to 10 mantissa bits") {
  Gemm g;
  g.m = g.n = g.k = 1;
  auto product = [&](float a) { return run_checked(g, {a, 0, 0}, {1.0f, 0, 0})[0]; };
  const float below_half = 1.0f + 0x1p-12f, tie_even = 1.0f + 0x1p-11f,
              tie_odd = 1.0f + 3 * 0x1p-11f;
  CHECK(product(below_half) == below_half);  // true fp32 keeps every bit
  g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  CHECK(product(below_half) == 1.0f);
  CHECK(product(tie_even) == 1.0f);
  CHECK(product(tie_odd) == 1.0f + 0x1p-9f);
}

TEST_CASE("sim cuBLASLt: the epilogues") {
  Gemm g;
  g.ta = true;
  const auto A = values(g.a_count(), 14, g.ab), B = values(g.b_count(), 15, g.ab);
  const auto base = reference(g, A, B);
  const auto bias = values(std::max(g.m, g.n), 16, g.cd);
  DeviceBuffer dbias(std::max(g.m, g.n) * 4);
  upload(dbias.get(), bias, g.cd);
  g.bias = dbias.get();
  const int64_t aux_ld = 8;  // divisible by 8 and >= m, as documented
  DeviceBuffer daux(aux_ld * g.n * 4);
  g.aux_ld = aux_ld;

  SUBCASE("RELU_BIAS and GELU_BIAS apply the activation after the bias") {
    for (auto e : {CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS}) {
      g.epilogue = e;
      const auto D = run_checked(g, A, B);
      for (uint64_t j = 0; j < g.n; ++j)
        for (uint64_t i = 0; i < g.m; ++i) {
          const double x = base[i + j * g.m] + bias[i];
          CHECK(D[i + j * g.ld_d()] ==
                doctest::Approx(e == CUBLASLT_EPILOGUE_GELU_BIAS ? gelu_ref(x) : std::max(x, 0.0))
                    .epsilon(1e-5));
        }
    }
  }
  SUBCASE("GELU_AUX_BIAS stores the GELU input in the aux matrix") {
    g.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    g.aux = daux.get();
    const auto D = run_checked(g, A, B);
    const auto aux = download(daux.get(), aux_ld * g.n, g.cd);
    for (uint64_t j = 0; j < g.n; ++j)
      for (uint64_t i = 0; i < g.m; ++i) {
        const double x = base[i + j * g.m] + bias[i];
        CHECK(aux[i + j * aux_ld] == doctest::Approx(x).epsilon(1e-6));
        CHECK(D[i + j * g.ld_d()] == doctest::Approx(gelu_ref(x)).epsilon(1e-5));
      }
  }
  SUBCASE("DGELU_BGRAD multiplies by GELU'(aux) and writes the row sums to the bias") {
    const auto pre = values(aux_ld * g.n, 17, g.cd);
    upload(daux.get(), pre, g.cd);
    g.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD;
    g.aux = daux.get();
    const auto D = run_checked(g, A, B);
    const auto grad = download(dbias.get(), g.m, g.cd);
    for (uint64_t i = 0; i < g.m; ++i) {
      double row = 0;
      for (uint64_t j = 0; j < g.n; ++j) {
        const double x = base[i + j * g.m] * gelu_grad_ref(pre[i + j * aux_ld]);
        CHECK(D[i + j * g.ld_d()] == doctest::Approx(x).epsilon(1e-5));
        row += x;
      }
      CHECK(grad[i] == doctest::Approx(row).epsilon(1e-5));
    }
  }
  SUBCASE("BGRADB sums op(B) over k (n values), BGRADA op(A) over k (m values)") {
    for (auto e : {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB}) {
      g.epilogue = e;
      check_close(g, run_checked(g, A, B), base, 1e-6);  // D itself is the plain product
      const bool of_b = e == CUBLASLT_EPILOGUE_BGRADB;
      const auto grad = download(dbias.get(), of_b ? g.n : g.m, g.cd);
      for (uint64_t r = 0; r < (of_b ? g.n : g.m); ++r) {
        double s = 0;
        for (uint64_t q = 0; q < g.k; ++q)
          s += of_b ? B[q + r * g.ld_b()] : A[q + r * g.ld_a()];  // op(A) = A^T here
        CHECK(grad[r] == doctest::Approx(s).epsilon(1e-6));
      }
    }
  }
  SUBCASE("an aux ld not divisible by 8 is refused") {
    g.epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
    g.aux = daux.get();
    g.aux_ld = 6;
    DeviceBuffer da(g.a_count() * 4), db(g.b_count() * 4), dd(g.d_count() * 4);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("the ReLU bit-mask epilogues are not implemented") {
    g.epilogue = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    DeviceBuffer da(g.a_count() * 4), db(g.b_count() * 4), dd(g.d_count() * 4);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST_CASE("sim cuBLASLt: pointers less aligned than a GPU kernel assumes are refused") {
  Gemm g;
  g.lda = 64;  // 256-byte columns: the ld promises as much alignment as the preference
  DeviceBuffer da(g.a_count() * 4 + 256), db(g.b_count() * 4), dd(g.d_count() * 4);
  const char* a_off4 = da.get(4);

  SUBCASE("A at a 4-byte offset, the preference claiming 256 (the default)") {
    CHECK(g.run(a_off4, db.get(), nullptr, dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
    g.align_a = 256;
    CHECK(g.run(a_off4, db.get(), nullptr, dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
  }
  SUBCASE("the same A runs when the preference states its real alignment") {
    g.align_a = 4;
    CHECK(g.run(a_off4, db.get(), nullptr, dd.get()) == CUBLAS_STATUS_SUCCESS);
  }
  SUBCASE("an ld that only guarantees 4 bytes makes the heuristic assume no more") {
    g.lda = 5;  // columns 20 bytes apart
    CHECK(g.run(a_off4, db.get(), nullptr, dd.get()) == CUBLAS_STATUS_SUCCESS);
  }
  SUBCASE("a pointer not aligned to its element size never runs") {
    g.align_a = 1;
    CHECK(g.run(da.get(2), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
  }
  SUBCASE("a bias at a 4-byte offset (an odd d_model in a packed buffer) is refused") {
    g.epilogue = CUBLASLT_EPILOGUE_BIAS;
    DeviceBuffer dbias(g.m * 4 + 64);
    g.bias = dbias.get(4);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
    g.bias = dbias.get(16);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_SUCCESS);
  }
}

TEST_CASE("sim cuBLASLt: memory outside every device allocation is refused (memcheck)") {
  Gemm g;
  DeviceBuffer da(g.a_count() * 4), db(g.b_count() * 4), dd(g.d_count() * 4);
  SUBCASE("host memory") {
    std::vector<float> host(g.b_count());
    CHECK(g.run(da.get(), host.data(), nullptr, dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
  }
  SUBCASE("an allocation one element too small") {
    const size_t span = (g.n - 1) * static_cast<size_t>(g.ld_d()) + g.m;  // D's last element + 1
    DeviceBuffer short_d((span - 1) * 4);
    CHECK(g.run(da.get(), db.get(), nullptr, short_d.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
  }
  SUBCASE("C is checked when it is read (beta != 0)") {
    g.beta = 1.0f;
    std::vector<float> host(g.d_count());
    CHECK(g.run(da.get(), db.get(), host.data(), dd.get()) == CUBLAS_STATUS_EXECUTION_FAILED);
  }
}

TEST_CASE("sim cuBLASLt: row-major layouts (CUBLASLT_ORDER_ROW)") {
  // A row-major m x k matrix with ld = k is the column-major k x m one: op_T of it.
  Gemm col;
  col.ta = true;
  col.lda = static_cast<int64_t>(col.k);
  const auto A = values(col.a_count(), 18, col.ab), B = values(col.b_count(), 19, col.ab);
  const auto expected = run_checked(col, A, B);

  cublasLtHandle_t h;
  REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t op;
  REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la, lb, ld;
  REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, col.m, col.k, col.lda) ==
          CUBLAS_STATUS_SUCCESS);
  const int32_t row = CUBLASLT_ORDER_ROW;
  REQUIRE(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, col.k, col.n, col.ld_b()) ==
          CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, col.m, col.n, col.ld_d()) ==
          CUBLAS_STATUS_SUCCESS);
  DeviceBuffer da(col.a_count() * 4), db(col.b_count() * 4), dd(col.d_count() * 4);
  upload(da.get(), A, CUDA_R_32F);
  upload(db.get(), B, CUDA_R_32F);
  const float one = 1.0f, zero = 0.0f;
  CHECK(cublasLtMatmul(h, op, &one, da.get(), la, db.get(), lb, &zero, dd.get(), ld, dd.get(), ld,
                       nullptr, nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
  const auto D = download(dd.get(), col.d_count(), CUDA_R_32F);
  for (uint64_t j = 0; j < col.n; ++j)
    for (uint64_t i = 0; i < col.m; ++i)
      CHECK(D[i + j * col.ld_d()] == expected[i + j * col.ld_d()]);
  for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
}

TEST_CASE("sim cuBLASLt: descriptor errors the library reports") {
  SUBCASE("ld < rows") {
    Gemm g;
    g.lda = static_cast<int64_t>(g.a_rows()) - 1;
    DeviceBuffer da(g.a_count() * 4 + 64), db(g.b_count() * 4), dd(g.d_count() * 4);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("SetAttribute with the wrong size") {
    cublasLtMatmulDesc_t op;
    REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    const int64_t wide = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide) ==
          CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulDescDestroy(op);
    cublasLtMatmulPreference_t pref;
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    const uint64_t align = 16;  // the attribute is uint32_t
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &align,
                                               sizeof align) == CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulPreferenceDestroy(pref);
  }
  SUBCASE("mismatched types") {
    Gemm g;
    g.ab = CUDA_R_32F;
    g.cd = CUDA_R_16BF;  // f32 inputs only give f32 outputs
    DeviceBuffer da(g.a_count() * 4), db(g.b_count() * 4), dd(g.d_count() * 4);
    CHECK(g.run(da.get(), db.get(), nullptr, dd.get()) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("status names and strings") {
    CHECK(std::strcmp(cublasLtGetStatusName(CUBLAS_STATUS_EXECUTION_FAILED),
                      "CUBLAS_STATUS_EXECUTION_FAILED") == 0);
    CHECK(std::strlen(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED)) > 0);
  }
}
