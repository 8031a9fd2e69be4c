// cuBLASLt for trainrun's CPU-executed device: every cublasLtMatmul is a plain reference GEMM
// (double accumulation) that honours the descriptors exactly as the library documents them, so
// kernels/matmul.cpp's row-major -> column-major mapping is tested as written. Inputs are
// widened, C is read only when beta != 0 (as BLAS defines), results round once to D's type
// (bf16 to nearest even, as the GPU's final conversion does). C and D may be the same matrix:
// every result is computed before any is stored.
//
// What a GPU would refuse, the sim refuses at the call, with a message on stderr naming the
// pointer: CUBLAS_STATUS_EXECUTION_FAILED where a kernel would fault, INVALID_VALUE or
// NOT_SUPPORTED where the library itself refuses. The rules, and where they are written:
//
//  * MIN_ALIGNMENT_{A,B,C,D}_BYTES (cublasLt.h, cublasLtMatmulPreferenceAttributes_t): "Minimum
//    buffer alignment for matrix A (in bytes). Selecting a smaller value will exclude algorithms
//    that can not work with matrix A that is not as strictly aligned as they need. uint32_t,
//    default: 256". The heuristic never sees A..D, so it trusts these numbers; an algorithm
//    chosen for 256 bytes that then gets a less aligned pointer is what faults on a GPU.
//  * CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES (same header): the alignment an algorithm needs is
//    "required for buffer pointer, leading dimension, and possibly other strides". The heuristic
//    does see ld, so it only picks algorithms whose alignment the column stride (ld x element
//    size) also has; the sim's algorithm records min(preference, alignment of ld in bytes).
//  * Every element access must be aligned to the element's size (a GPU faults otherwise).
//  * CUBLASLT_MATMUL_DESC_BIAS_POINTER and EPILOGUE_AUX_POINTER (same header, and the cuBLAS docs,
//    cublasLtMatmulDescAttributes_t): "Routines that don't dereference this pointer, like
//    cublasLtMatmulAlgoGetHeuristic() depend on its value to determine expected pointer
//    alignment." So the algorithm assumes the bias/aux alignment that the pointer set at
//    heuristic time had, and the sim records it.
//  * No documented minimum for the bias (or aux) pointer was found. Epilogue kernels load these
//    vectors 16 bytes at a time, and a bias at a 4-byte offset is reported to fault with
//    "misaligned address" (pytorch/pytorch#194497: "cuBLASLt's alignment preferences cover A, B,
//    C, D but not the epilogue bias pointer, so the heuristic can pick a kernel that assumes
//    16-byte bias alignment"; marian-nmt's prod.cpp keeps REQUIRED_BIAS_ALIGNMENT = 16 after an
//    "alignment error on A100"). The sim therefore requires 16 bytes for both: the conservative
//    assumption, not a documented rule.
//  * EPILOGUE_AUX_LD for the GELU input matrix (cublasLt.h): "Must be divisible by 8 and be no
//    less than the number of rows in the output matrix." -> INVALID_VALUE.
//  * CUBLASLT_MATRIX_LAYOUT_LD (cublasLt.h): "must be large enough so that matrix memory
//    locations are not overlapping (e.g. greater or equal to CUBLASLT_MATRIX_LAYOUT_ROWS in case
//    of CUBLASLT_ORDER_COL)" -> INVALID_VALUE.
//
// Memcheck: every matrix and vector the call reads or writes must lie inside one live device
// allocation (trainrun::sim::is_device_range); on a GPU an access outside faults or, worse,
// silently corrupts a neighbouring allocation.
//
// The epilogues follow cublasLtEpilogue_t: the bias (length = rows of D) is added to every
// column before the activation; GELU is the tanh approximation (the one cuBLASLt's GELU
// epilogue computes, evaluated in fp32 as the GPU does); *_AUX stores the GELU input in the aux
// matrix (D's type, ld = EPILOGUE_AUX_LD); DGELU multiplies the result by GELU'(aux); *BGRAD
// writes the bias gradient (sum over the columns of the result for DGELU_BGRAD, over k of
// op(A) for BGRADA and of op(B) for BGRADB) to BIAS_POINTER, overwriting it. The ReLU bit-mask
// epilogues (RELU_AUX*, DRELU*) are not implemented: CUBLAS_STATUS_NOT_SUPPORTED.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sim_memory.h"

struct cublasLtContext {
  uint64_t magic;
};

struct cublasLtMatmulDescOpaque_t {
  int32_t compute;
  int32_t scale;
  int32_t transa = CUBLAS_OP_N;
  int32_t transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: the documented default, D's type
  const void* aux = nullptr;
  int64_t aux_ld = 0;
};

struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows;
  uint64_t cols;
  int64_t ld;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D: the documented default
};

namespace {

using Desc = cublasLtMatmulDescOpaque_t;
using Layout = cublasLtMatrixLayoutOpaque_t;

constexpr uint64_t kHandleMagic = 0x746c62756373ull;    // "scublt"
constexpr uint64_t kAlgoMagic = 0x6f676c4174696d73ull;  // "simtAlgo"
constexpr uint32_t kMaxAlignment = 256;            // what the library assumes when told nothing
constexpr uint32_t kEpilogueVectorAlignment = 16;  // bias/aux: see the top of the file

// Where the heuristic's assumptions live in cublasLtMatmulAlgo_t::data.
enum AlgoSlot { kSlotMagic = 0, kSlotA, kSlotB, kSlotC, kSlotD, kSlotBias, kSlotAux };

void report(const char* call, const std::string& message) {
  std::fprintf(stderr, "trainrun sim cuBLASLt: %s: %s\n", call, message.c_str());
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Attribute values are copied in only when the caller's size matches the documented type's, as
// the library checks ("sizeInBytes doesn't match size of internal storage" -> INVALID_VALUE).
template <class T>
cublasStatus_t set_field(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t unknown_attribute(const char* call, int attr) {
  report(call, "attribute " + std::to_string(attr) + " is not one the sim implements");
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

bool valid(cublasLtHandle_t h) {
  return h != nullptr && h->magic == kHandleMagic;
}

size_t element_size(uint32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;  // not a type the sim's GEMM handles
  }
}

const char* type_name(uint32_t type) {
  switch (type) {
    case CUDA_R_32F:
      return "CUDA_R_32F";
    case CUDA_R_16BF:
      return "CUDA_R_16BF";
    default:
      return "an unsupported cudaDataType";
  }
}

// The largest power of two up to kMaxAlignment that divides `value`.
uint64_t alignment_of(uint64_t value) {
  uint64_t a = kMaxAlignment;
  while (a > 1 && value % a != 0) a /= 2;
  return a;
}
uint64_t alignment_of(const void* p) {
  return alignment_of(reinterpret_cast<uintptr_t>(p));
}

double load(const void* base, uint32_t type, uint64_t index) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[index];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
}

// One rounding to the stored type; the GPU holds results in fp32, so bf16 rounds from there.
void store(void* base, uint32_t type, uint64_t index, double value) {
  const float f = static_cast<float>(value);
  if (type == CUDA_R_32F)
    static_cast<float*>(base)[index] = f;
  else
    static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(f);
}

// CUBLAS_COMPUTE_32F_FAST_TF32 multiplies TF32 values: fp32 rounded to a 10-bit mantissa, here
// to nearest even (the GPU's cvt.rna rounds ties away from zero: the two differ only on exact
// ties). Inf and NaN pass unchanged.
float round_to_tf32(float f) {
  uint32_t u = trainrun::f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u += 0xfffu + ((u >> 13) & 1u);
  return trainrun::f32_from_bits(u & 0xffffe000u);
}

// Element offsets of a stored matrix: (i, j) is at i * row_step + j * col_step.
struct Strides {
  uint64_t row_step, col_step;
};
Strides strides_of(const Layout& l) {
  const uint64_t ld = static_cast<uint64_t>(l.ld);
  return l.order == CUBLASLT_ORDER_COL ? Strides{1, ld} : Strides{ld, 1};
}

// Elements from the first to one past the last, what the matrix occupies in memory.
uint64_t span_elements(const Layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const Strides s = strides_of(l);
  return (l.rows - 1) * s.row_step + (l.cols - 1) * s.col_step + 1;
}

// Whether the leading dimension separates elements at all (one column, or one row, has no stride).
bool ld_matters(const Layout& l) {
  return l.order == CUBLASLT_ORDER_COL ? l.cols > 1 : l.rows > 1;
}

// ---- the operation, as validated from the descriptors ----

enum class Activation { none, relu, gelu, dgelu };
enum class BiasUse { none, add, grad_of_result, grad_of_a, grad_of_b };

struct Epilogue {
  bool known = false;
  BiasUse bias = BiasUse::none;
  Activation act = Activation::none;
  bool aux_out = false;  // stores the GELU input
  bool aux_in = false;   // reads the GELU input (DGELU)
};

Epilogue epilogue_of(uint32_t e) {
  using A = Activation;
  using B = BiasUse;
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return {true, B::none, A::none, false, false};
    case CUBLASLT_EPILOGUE_RELU:
      return {true, B::none, A::relu, false, false};
    case CUBLASLT_EPILOGUE_BIAS:
      return {true, B::add, A::none, false, false};
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return {true, B::add, A::relu, false, false};
    case CUBLASLT_EPILOGUE_GELU:
      return {true, B::none, A::gelu, false, false};
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return {true, B::none, A::gelu, true, false};
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return {true, B::add, A::gelu, false, false};
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return {true, B::add, A::gelu, true, false};
    case CUBLASLT_EPILOGUE_DGELU:
      return {true, B::none, A::dgelu, false, true};
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      return {true, B::grad_of_result, A::dgelu, false, true};
    case CUBLASLT_EPILOGUE_BGRADA:
      return {true, B::grad_of_a, A::none, false, false};
    case CUBLASLT_EPILOGUE_BGRADB:
      return {true, B::grad_of_b, A::none, false, false};
    default:
      return {};
  }
}

struct Plan {
  uint64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false, tf32 = false;
  Epilogue epi;
  uint32_t bias_type = CUDA_R_32F;
  uint64_t bias_len = 0;
};

cublasStatus_t check_layout(const char* call, const char* name, const Layout* l) {
  if (l == nullptr) {
    report(call, std::string("layout ") + name + " is null");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (element_size(l->type) == 0) {
    report(call, std::string("matrix ") + name + ": type " + std::to_string(l->type) +
                     " is not supported (CUDA_R_32F and CUDA_R_16BF are)");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW) {
    report(call,
           std::string("matrix ") + name + ": only CUBLASLT_ORDER_COL and _ROW are supported");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint64_t min_ld = std::max<uint64_t>(1, l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols);
  if (l->ld < 0 || static_cast<uint64_t>(l->ld) < min_ld) {
    report(call, std::string("matrix ") + name + ": ld " + std::to_string(l->ld) + " < " +
                     (l->order == CUBLASLT_ORDER_COL ? "rows " : "cols ") + std::to_string(min_ld));
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool transposed(int32_t op) {
  return op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// Everything the heuristic and the matmul both check, in one place.
cublasStatus_t make_plan(const char* call, const Desc* d, const Layout* a, const Layout* b,
                         const Layout* c, const Layout* dl, Plan& plan) {
  if (d == nullptr) {
    report(call, "the matmul descriptor is null");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (const auto& [name, l] : {std::pair{"A", a}, {"B", b}, {"C", c}, {"D", dl}})
    if (const cublasStatus_t st = check_layout(call, name, l); st != CUBLAS_STATUS_SUCCESS)
      return st;
  for (int32_t op : {d->transa, d->transb})
    if (op != CUBLAS_OP_N && !transposed(op)) {
      report(call, "TRANSA/TRANSB must be CUBLAS_OP_N, _T or _C, not " + std::to_string(op));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  plan.trans_a = transposed(d->transa);
  plan.trans_b = transposed(d->transb);
  plan.m = plan.trans_a ? a->cols : a->rows;
  plan.k = plan.trans_a ? a->rows : a->cols;
  const uint64_t kb = plan.trans_b ? b->cols : b->rows;
  plan.n = plan.trans_b ? b->rows : b->cols;
  if (kb != plan.k || dl->rows != plan.m || dl->cols != plan.n || c->rows != plan.m ||
      c->cols != plan.n) {
    report(call, "shapes do not agree: op(A) is " + std::to_string(plan.m) + "x" +
                     std::to_string(plan.k) + ", op(B) " + std::to_string(kb) + "x" +
                     std::to_string(plan.n) + ", C " + std::to_string(c->rows) + "x" +
                     std::to_string(c->cols) + ", D " + std::to_string(dl->rows) + "x" +
                     std::to_string(dl->cols));
    return CUBLAS_STATUS_INVALID_VALUE;
  }

  // The type combinations cuBLASLt lists for CUBLAS_COMPUTE_32F[_FAST_TF32] with fp32 scale:
  // A and B alike; C and D alike; f32 inputs give f32 outputs, bf16 inputs bf16 or f32 outputs.
  const bool f32_inputs = a->type == CUDA_R_32F;
  const bool types_ok =
      a->type == b->type && c->type == dl->type && (dl->type == CUDA_R_32F || dl->type == a->type);
  const bool compute_ok = d->compute == CUBLAS_COMPUTE_32F ||
                          (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && f32_inputs);
  if (!types_ok || !compute_ok || d->scale != CUDA_R_32F) {
    report(call, std::string("unsupported combination: A ") + type_name(a->type) + ", B " +
                     type_name(b->type) + ", C " + type_name(c->type) + ", D " +
                     type_name(dl->type) + ", compute type " + std::to_string(d->compute) +
                     ", scale type " + std::to_string(d->scale));
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  plan.tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;

  plan.epi = epilogue_of(d->epilogue);
  if (!plan.epi.known) {
    report(call, "epilogue " + std::to_string(d->epilogue) + " is not implemented by the sim");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (plan.epi.bias != BiasUse::none) {
    plan.bias_type = d->bias_type < 0 ? dl->type : static_cast<uint32_t>(d->bias_type);
    if (plan.bias_type != dl->type && plan.bias_type != CUDA_R_32F) {
      report(call, std::string("bias type ") + type_name(plan.bias_type) + " with D of type " +
                       type_name(dl->type) + " is not supported");
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    plan.bias_len = plan.epi.bias == BiasUse::grad_of_b ? plan.n : plan.m;
  }
  if ((plan.epi.aux_in || plan.epi.aux_out) &&
      (d->aux_ld % 8 != 0 || d->aux_ld < static_cast<int64_t>(std::max<uint64_t>(1, plan.m)))) {
    report(call, "EPILOGUE_AUX_LD " + std::to_string(d->aux_ld) +
                     " must be divisible by 8 and no less than the rows of D (" +
                     std::to_string(plan.m) + ")");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What the one algorithm the sim offers assumes: per matrix the preferred alignment, lowered to
// what ld already guarantees (see the top of the file); for bias and aux the pointers' own.
cublasLtMatmulAlgo_t choose_algo(const Desc& d, const Layout* const (&ls)[4],
                                 const uint32_t (&min_alignment)[4]) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[kSlotMagic] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) {
    const Layout& l = *ls[i];
    uint64_t assumed = min_alignment[i];
    if (ld_matters(l))
      assumed = std::min(assumed, alignment_of(static_cast<uint64_t>(l.ld) * element_size(l.type)));
    algo.data[kSlotA + i] = assumed;
  }
  algo.data[kSlotBias] = alignment_of(d.bias);
  algo.data[kSlotAux] = alignment_of(d.aux);
  return algo;
}

// A GPU kernel faults on a pointer, or a column stride, less aligned than it was built for.
bool aligned_as_assumed(const char* name, const void* p, const Layout& l, uint64_t assumed,
                        const char* pref_name) {
  const uint64_t es = element_size(l.type);
  const uint64_t need = std::max(es, assumed);
  if (reinterpret_cast<uintptr_t>(p) % need != 0) {
    report("cublasLtMatmul",
           std::string("matrix ") + name + " at " + hex(p) + " is only " +
               std::to_string(alignment_of(p)) + "-byte aligned, but the algorithm assumes " +
               std::to_string(need) + " bytes (" + pref_name +
               ", default 256, and the element size): on a GPU the kernel would fault with a "
               "misaligned address");
    return false;
  }
  if (ld_matters(l) && (static_cast<uint64_t>(l.ld) * es) % need != 0) {
    report("cublasLtMatmul", std::string("matrix ") + name + ": ld " + std::to_string(l.ld) +
                                 " x " + std::to_string(es) + " bytes is not a multiple of the " +
                                 std::to_string(need) +
                                 " bytes the algorithm assumes (layout changed since the "
                                 "heuristic?): its columns would be misaligned on a GPU");
    return false;
  }
  return true;
}

bool vector_aligned(const char* name, const void* p, uint64_t assumed) {
  const uint64_t need = std::max<uint64_t>(kEpilogueVectorAlignment, assumed);
  if (reinterpret_cast<uintptr_t>(p) % need == 0) return true;
  report("cublasLtMatmul",
         std::string(name) + " at " + hex(p) + " is only " + std::to_string(alignment_of(p)) +
             "-byte aligned; the epilogue needs " + std::to_string(need) +
             " bytes (16: cuBLASLt's epilogue kernels may load it 16 bytes at a time, which can "
             "fault with a misaligned address on a GPU; more if the pointer given to the "
             "heuristic was more aligned than this one)");
  return false;
}

bool in_device_memory(const char* what, const void* p, uint64_t bytes) {
  if (bytes == 0 || trainrun::sim::is_device_range(p, bytes)) return true;
  report("cublasLtMatmul", std::string(what) + " [" + hex(p) + ", +" + std::to_string(bytes) +
                               " bytes) does not lie inside one device allocation (memcheck): on "
                               "a GPU an illegal address, or a neighbour silently corrupted");
  return false;
}

// ---- arithmetic ----

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

float gelu_grad(float x) {
  const float th = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

struct Operand {
  const void* p;
  const Layout* l;
  double at(uint64_t i, uint64_t j) const {
    const Strides s = strides_of(*l);
    return load(p, l->type, i * s.row_step + j * s.col_step);
  }
};

void run_gemm(const Plan& plan, const Desc& d, float alpha, float beta, Operand a, Operand b,
              Operand c, void* dp, const Layout& dl) {
  const uint64_t m = plan.m, n = plan.n, k = plan.k;
  // op(A) as m rows of k, op(B) as n rows of k: the dot products then read both contiguously.
  auto input = [&](double v) { return plan.tf32 ? round_to_tf32(static_cast<float>(v)) : v; };
  std::vector<double> opa(m * k), opb(n * k);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t q = 0; q < k; ++q) opa[i * k + q] = input(plan.trans_a ? a.at(q, i) : a.at(i, q));
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t q = 0; q < k; ++q) opb[j * k + q] = input(plan.trans_b ? b.at(j, q) : b.at(q, j));

  const Epilogue& epi = plan.epi;
  const uint32_t aux_type = dl.type;  // "GELU input matrix elements type is the same as ... output"
  std::vector<double> bias_grad(plan.bias_len, 0.0);  // used by the *BGRAD* epilogues
  std::vector<double> result(m * n);
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      if (alpha != 0.0f)
        for (uint64_t q = 0; q < k; ++q) acc += opa[i * k + q] * opb[j * k + q];
      double x = static_cast<double>(alpha) * acc;
      if (beta != 0.0f) x += static_cast<double>(beta) * c.at(i, j);
      if (epi.bias == BiasUse::add) x += load(d.bias, plan.bias_type, i);
      const uint64_t aux_index = i + j * static_cast<uint64_t>(d.aux_ld);
      if (epi.aux_out) store(const_cast<void*>(d.aux), aux_type, aux_index, x);
      // Activations run in fp32, as on the GPU.
      switch (epi.act) {
        case Activation::none:
          break;
        case Activation::relu:
          x = std::max(x, 0.0);
          break;
        case Activation::gelu:
          x = gelu(static_cast<float>(x));
          break;
        case Activation::dgelu:
          x = static_cast<float>(x) *
              gelu_grad(static_cast<float>(load(d.aux, aux_type, aux_index)));
          break;
      }
      if (epi.bias == BiasUse::grad_of_result) bias_grad[i] += x;
      result[i + j * m] = x;
    }
  }
  if (epi.bias == BiasUse::grad_of_a)
    for (uint64_t i = 0; i < m; ++i)
      for (uint64_t q = 0; q < k; ++q) bias_grad[i] += plan.trans_a ? a.at(q, i) : a.at(i, q);
  if (epi.bias == BiasUse::grad_of_b)
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t q = 0; q < k; ++q) bias_grad[j] += plan.trans_b ? b.at(j, q) : b.at(q, j);

  const Strides ds = strides_of(dl);
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i)
      store(dp, dl.type, i * ds.row_step + j * ds.col_step, result[i + j * m]);
  if (epi.bias != BiasUse::none && epi.bias != BiasUse::add)
    for (uint64_t i = 0; i < plan.bias_len; ++i)
      store(const_cast<void*>(d.bias), plan.bias_type, i, bias_grad[i]);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{kHandleMagic};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->magic = 0;  // a use after destroy then reads NOT_INITIALIZED, as long as memory holds
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "an error detected when checking the current licensing";
  }
  return "unknown error";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new Desc{};
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return set_field(desc->compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return set_field(desc->scale, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set_field(desc->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set_field(desc->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set_field(desc->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set_field(desc->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set_field(desc->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set_field(desc->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set_field(desc->bias_type, buf, size);
  }
  return unknown_attribute("cublasLtMatmulDescSetAttribute", attr);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new Layout{static_cast<uint32_t>(type), CUBLASLT_ORDER_COL, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return set_field(layout->type, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return set_field(layout->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return set_field(layout->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return set_field(layout->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return set_field(layout->ld, buf, size);
  }
  return unknown_attribute("cublasLtMatrixLayoutSetAttribute", attr);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_field(pref->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set_field(pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf,
                       size);
  }
  return unknown_attribute("cublasLtMatmulPreferenceSetAttribute", attr);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  const char* call = "cublasLtMatmulAlgoGetHeuristic";
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (pref == nullptr || requested <= 0 || results == nullptr || returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  Plan plan;
  if (const cublasStatus_t st = make_plan(call, desc, a, b, c, d, plan);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  // One algorithm, which needs no workspace, so every MAX_WORKSPACE_BYTES admits it.
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo = choose_algo(*desc, {a, b, c, d}, pref->min_alignment);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t /*stream*/) {
  const char* call = "cublasLtMatmul";
  if (!valid(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Plan plan;
  if (const cublasStatus_t st = make_plan(call, desc, a, b, c, d, plan);
      st != CUBLAS_STATUS_SUCCESS)
    return st;
  // Without an algorithm the library runs the heuristic itself, with default preferences.
  const cublasLtMatmulAlgo_t chosen =
      algo ? *algo
           : choose_algo(*desc, {a, b, c, d}, cublasLtMatmulPreferenceOpaque_t{}.min_alignment);
  if (chosen.data[kSlotMagic] != kAlgoMagic) {
    report(call, "algo was not produced by cublasLtMatmulAlgoGetHeuristic");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  const Epilogue& epi = plan.epi;
  const bool uses_bias = epi.bias != BiasUse::none;
  const bool uses_aux = epi.aux_in || epi.aux_out;
  if (uses_bias && desc->bias == nullptr) {
    report(call, "the epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER, which is null");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (uses_aux && desc->aux == nullptr) {
    report(call, "the epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, which is null");
    return CUBLAS_STATUS_INVALID_VALUE;
  }

  // Memcheck: everything read or written lies in device memory (C only when it is read).
  auto bytes_of = [](const Layout* l) { return span_elements(*l) * element_size(l->type); };
  Layout aux_layout{d->type, CUBLASLT_ORDER_COL, plan.m, plan.n, desc->aux_ld};
  const bool memory_ok =
      in_device_memory("matrix A", A, bytes_of(a)) &&
      in_device_memory("matrix B", B, bytes_of(b)) &&
      (beta_v == 0.0f || in_device_memory("matrix C", C, bytes_of(c))) &&
      in_device_memory("matrix D", D, bytes_of(d)) &&
      (!uses_bias || in_device_memory("the bias vector (BIAS_POINTER)", desc->bias,
                                      plan.bias_len * element_size(plan.bias_type))) &&
      (!uses_aux || in_device_memory("the epilogue aux matrix (EPILOGUE_AUX_POINTER)", desc->aux,
                                     bytes_of(&aux_layout))) &&
      (workspace == nullptr || in_device_memory("the workspace", workspace, workspace_bytes));
  if (!memory_ok) return CUBLAS_STATUS_EXECUTION_FAILED;

  const bool alignment_ok =
      aligned_as_assumed("A", A, *a, chosen.data[kSlotA], "MIN_ALIGNMENT_A_BYTES") &&
      aligned_as_assumed("B", B, *b, chosen.data[kSlotB], "MIN_ALIGNMENT_B_BYTES") &&
      (beta_v == 0.0f ||
       aligned_as_assumed("C", C, *c, chosen.data[kSlotC], "MIN_ALIGNMENT_C_BYTES")) &&
      aligned_as_assumed("D", D, *d, chosen.data[kSlotD], "MIN_ALIGNMENT_D_BYTES") &&
      (!uses_bias ||
       vector_aligned("the bias vector (BIAS_POINTER)", desc->bias, chosen.data[kSlotBias])) &&
      (!uses_aux || vector_aligned("the epilogue aux matrix (EPILOGUE_AUX_POINTER)", desc->aux,
                                   chosen.data[kSlotAux]));
  if (!alignment_ok) return CUBLAS_STATUS_EXECUTION_FAILED;

  run_gemm(plan, *desc, alpha_v, beta_v, {A, a}, {B, b}, {C, c}, D, *d);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
