// Host-side entry points of the hand-written kernels (one .cu file per op family). Plain C++ so
// the backend class (cuda_backend.cpp, built by g++) can call them. Pointers are device memory,
// shapes are already checked (Backend's public methods), everything runs on the legacy default
// stream, and each function throws DeviceError if its launch fails. `dt` is the activation dtype
// (f32 or bf16); `st` is the dtype of saved statistics (mean/rstd, lse, losses): f32, or equal to
// dt.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trainrun/core/adamw_update.h"
#include "trainrun/core/tensor.h"

namespace trainrun::cuda {

// elementwise.cu
void fill(DType dt, void* x, double value, int64_t n);
void add(DType dt, void* out, const void* a, const void* b, int64_t n);
void accumulate(DType dt, void* dst, const void* src, int64_t n);
void scale(DType dt, void* x, double s, int64_t n);
void cast(DType dst_dt, void* dst, DType src_dt, const void* src, int64_t n);
// out[r, c] += bias[c] (the matmul's bias where cuBLASLt's epilogue cannot read it).
void add_bias(DType dt, void* out, const void* bias, int64_t rows, int64_t cols);
// dst[c] += (or = when not accumulating) sum_r src[r, c]; deterministic two-pass reduction
// through `scratch`. dst has dtype gt: dt, or f32 beside bf16 (a parameter gradient).
size_t colsum_scratch_bytes(int64_t rows, int64_t cols);
void colsum(DType dt, DType gt, void* dst, const void* src, int64_t rows, int64_t cols,
            void* scratch, bool accumulate);

// activations.cu
void gelu_forward(DType dt, void* out, const void* in, int64_t n);
// din (+)= gelu'(in) * dout; overwriting (accumulate false) may run in place (din == dout).
void gelu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate);
void relu_forward(DType dt, void* out, const void* in, int64_t n);
// din (+)= (in > 0) * dout.
void relu_backward(DType dt, void* din, const void* dout, const void* in, int64_t n,
                   bool accumulate);

// dropout.cu
void dropout_forward(DType dt, void* out, const void* in, int64_t n, float p, uint64_t seed);
void dropout_backward(DType dt, void* din, const void* dout, int64_t n, float p, uint64_t seed);

// layernorm.cu. res null: normalises in (sum unused); else sum = in + res, and normalises that
// (residual_layernorm; sum may alias in or res).
void layernorm_forward(DType dt, DType st, void* out, void* mean, void* rstd, void* sum,
                       const void* in, const void* res, const void* w, const void* b, int64_t rows,
                       int64_t C);
size_t layernorm_backward_scratch_bytes(int64_t rows, int64_t C);
// din accumulates; dw and db too, or are overwritten (param_accumulate false). They have dtype
// gt: dt, or f32 beside bf16.
void layernorm_backward(DType dt, DType st, DType gt, void* din, void* dw, void* db,
                        const void* dout, const void* in, const void* w, const void* mean,
                        const void* rstd, int64_t rows, int64_t C, void* scratch,
                        bool param_accumulate);

// Token ids outside [0, V): the kernels that read ids never read out of bounds (a bad id gives a
// NaN row forward, is skipped backward) and flag it in *bad_id (common.cuh's flag_bad_id: the
// position in the high 32 bits, the id in the low 32, so atomicMin keeps the first position and
// its id). The caller sets *bad_id to kNoBadId before the launch and reads it back later, several
// launches' flags in one copy (cuda_backend.cpp). Positions must be below 2^32.
constexpr unsigned long long kNoBadId = ~0ull;
inline int64_t bad_id_position(unsigned long long flag) {
  return static_cast<int64_t>(flag >> 32);
}
inline int32_t bad_id_value(unsigned long long flag) {
  return static_cast<int32_t>(static_cast<uint32_t>(flag & 0xFFFFFFFFull));
}

// embedding.cu
void embedding_forward(DType dt, void* out, const int32_t* ids, const void* table, int64_t N,
                       int64_t C, int64_t V, unsigned long long* bad_id);
// dtable is f32 (atomics), dout f32 or bf16.
void embedding_backward(DType dt, void* dtable, const void* dout, const int32_t* ids, int64_t N,
                        int64_t C, int64_t V, unsigned long long* bad_id);

// attention.cu (head_dim <= 128): qkv [B,T,(NH+2*NKV)*hd], NKV divides NH (NKV = NH: MHA)
constexpr int kAttentionMaxHeadDim = 128;
// doc_start: [B,T] document starts on the device (Backend::attention), or nullptr.
void attention_forward(DType dt, DType st, void* out, void* lse, const void* qkv, int64_t B,
                       int64_t T, int64_t hd, int NH, int NKV, const int32_t* doc_start);
size_t attention_backward_scratch_bytes(int64_t B, int64_t T, int NH);
// dqkv += the gradient, or = without reading dqkv (accumulate false): each element is written by
// one thread once.
void attention_backward(DType dt, DType st, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const void* lse, int64_t B, int64_t T, int64_t hd, int NH,
                        int NKV, const int32_t* doc_start, bool accumulate, void* scratch);

// rmsnorm.cu: out = in * rstd * w, rstd = 1/sqrt(mean(in^2) + 1e-5); backward accumulates (dw
// overwritten when param_accumulate is false).
// res and sum as layernorm_forward's (residual_rmsnorm).
void rmsnorm_forward(DType dt, DType st, void* out, void* rstd, void* sum, const void* in,
                     const void* res, const void* w, int64_t rows, int64_t C);
size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t C);
void rmsnorm_backward(DType dt, DType st, DType gt, void* din, void* dw, const void* dout,
                      const void* in, const void* w, const void* rstd, int64_t rows, int64_t C,
                      void* scratch, bool param_accumulate);

// rope.cu: on the NH q and NKV k heads of [B,T,(NH+2*NKV)*hd]; v copied (backward: added when
// accumulating). out may alias in. doc_start: [B,T] document starts (positions restart there),
// or nullptr.
void rope_forward(DType dt, void* out, const void* in, int64_t B, int64_t T, int NH, int NKV,
                  int64_t hd, float theta, const int32_t* doc_start);
void rope_backward(DType dt, void* din, const void* dout, int64_t B, int64_t T, int NH, int NKV,
                   int64_t hd, float theta, const int32_t* doc_start, bool accumulate);

// swiglu.cu: in [N,2H] = (gate | up), out [N,H] = silu(gate) * up; backward accumulates or
// overwrites.
void swiglu_forward(DType dt, void* out, const void* in, int64_t N, int64_t H);
void swiglu_backward(DType dt, void* din, const void* dout, const void* in, int64_t N, int64_t H,
                     bool accumulate);

// cross_entropy.cu (a bad target: NaN loss / row, and flagged in *bad_id as above)
void cross_entropy_forward(DType dt, DType st, void* losses, void* lse, const void* logits,
                           const int32_t* targets, int64_t N, int64_t V,
                           unsigned long long* bad_id);
// Both in one kernel (Backend::cross_entropy_fused); dlogits may alias logits.
void cross_entropy_fused(DType dt, DType st, void* losses, void* lse, void* dlogits,
                         const void* logits, const int32_t* targets, int64_t N, int64_t V,
                         float scale, unsigned long long* bad_id);
void cross_entropy_backward(DType dt, DType st, void* dlogits, const void* logits, const void* lse,
                            const int32_t* targets, int64_t N, int64_t V, float scale,
                            unsigned long long* bad_id);

// reductions.cu: in double; sum() copies the result to the host (synchronises)
size_t reduce_scratch_bytes();
double sum(DType dt, const void* x, int64_t n, bool squares, void* scratch);
// The same reduction left on the device in *result (no wait): Backend::sum_to.
void sum_to(DType dt, const void* x, int64_t n, bool squares, void* scratch, double* result);

// adamw.cu: one run of AdamW's flat buffers, [begin, end), as the kernel reads it.
struct AdamWRunDevice {
  int64_t begin, end;
  int32_t decay;  // 1: hp.weight_decay, 0: none
};
// Every run in one launch; n = the end of the last run; runs is device memory.
void adamw_runs(float* param, const float* grad, float* m, float* v, const AdamWRunDevice* runs,
                int count, int64_t n, const AdamWStep<float>& decay,
                const AdamWStep<float>& no_decay);
// adamw.cu (f32 only): trainrun/core/adamw_update.h's element update over [0, n)
void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWStep<float>& s);

}  // namespace trainrun::cuda
