// The CPU reference kernels, one template per op over T = float or double, on raw contiguous
// memory. Shapes arrive already checked by Backend's public methods (backend.cpp); each kernel file
// explicitly instantiates both types. Conventions follow include/trainrun/backend/backend.h:
// forward overwrites, backward accumulates (+=); where a kernel takes `acc`, false overwrites din
// instead (GradWrite::overwrite) and never reads it.
#pragma once

#include <cstdint>

#include "trainrun/core/adamw_update.h"

namespace trainrun::cpu {

// matmul.cpp: out[N,OC] = in[N,C] . w[OC,C]^T + bias (bias may be null)
template <class T>
void matmul_forward(T* out, const T* in, const T* w, const T* bias, int64_t N, int64_t C,
                    int64_t OC);
// din (may be null) (+)= dout . w ; dw (+)= dout^T . in ; dbias (may be null) (+)= colsum(dout);
// acc for din, param_acc for dw and dbias
template <class T>
void matmul_backward(T* din, T* dw, T* dbias, const T* dout, const T* in, const T* w, int64_t N,
                     int64_t C, int64_t OC, bool acc, bool param_acc);

// layernorm.cpp
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* in, const T* w, const T* b, int64_t rows,
                       int64_t C);
template <class T>
void layernorm_backward(T* din, T* dw, T* db, const T* dout, const T* in, const T* w, const T* mean,
                        const T* rstd, int64_t rows, int64_t C, bool param_acc);

// rmsnorm.cpp: out = in * rstd * w, rstd [rows] = 1 / sqrt(mean(in^2) + 1e-5)
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* in, const T* w, int64_t rows, int64_t C);
template <class T>
void rmsnorm_backward(T* din, T* dw, const T* dout, const T* in, const T* w, const T* rstd,
                      int64_t rows, int64_t C, bool param_acc);

// rope.cpp: rotary embedding on the NH q and NKV k heads of qkv [B,T,(NH+2*NKV)*hd]; v copied.
// out may alias in. Backward: din += R^T dout (v: din += dout), or = when not accumulating.
// doc_start [B,T] or nullptr: the position is the offset in the document (documents.h).
template <class T>
void rope_forward(T* out, const T* in, int64_t B, int64_t T_, int NH, int NKV, int64_t hd,
                  double theta, const int32_t* doc_start);
template <class T>
void rope_backward(T* din, const T* dout, int64_t B, int64_t T_, int NH, int NKV, int64_t hd,
                   double theta, const int32_t* doc_start, bool accumulate);

// swiglu.cpp: in [N,2H] = (gate | up), out [N,H] = silu(gate) * up
template <class T>
void swiglu_forward(T* out, const T* in, int64_t N, int64_t H);
template <class T>
void swiglu_backward(T* din, const T* dout, const T* in, int64_t N, int64_t H, bool acc);

// activations.cpp
template <class T>
void gelu_forward(T* out, const T* in, int64_t n);
template <class T>
void gelu_backward(T* din, const T* dout, const T* in, int64_t n, bool acc);
template <class T>
void relu_forward(T* out, const T* in, int64_t n);
template <class T>
void relu_backward(T* din, const T* dout, const T* in, int64_t n, bool acc);

// dropout.cpp: the mask of trainrun/core/dropout_mask.h; kept elements scale by 1/(1-p).
template <class T>
void dropout_forward(T* out, const T* in, int64_t n, float p, uint64_t seed);
template <class T>
void dropout_backward(T* din, const T* dout, int64_t n, float p, uint64_t seed);

// elementwise.cpp
template <class T>
void add(T* out, const T* a, const T* b, int64_t n);
template <class T>
void accumulate(T* dst, const T* src, int64_t n);
template <class T>
void scale(T* x, T s, int64_t n);
template <class T>
void fill(T* x, T value, int64_t n);

// attention.cpp: causal grouped-query self-attention, qkv [B,T,(NH+2*NKV)*hd] = (q | k | v),
// out [B,T,NH*hd], lse [B,NH,T]; q head h reads kv head h / (NH / NKV). doc_start [B,T] or
// nullptr: query t sees keys [first_key, t] (documents.h).
template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t hd, int NH,
                       int NKV, const int32_t* doc_start);
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                        int64_t T_, int64_t hd, int NH, int NKV, const int32_t* doc_start);

// embedding.cpp: ids already validated in [0, V)
template <class T>
void embedding_forward(T* out, const int32_t* ids, const T* table, int64_t N, int64_t C);
template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t N, int64_t C);

// cross_entropy.cpp: targets already validated in [0, V)
template <class T>
void cross_entropy_forward(T* losses, T* lse, const T* logits, const int32_t* targets, int64_t N,
                           int64_t V);
template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                            int64_t N, int64_t V, T scale);

// reductions.cpp: accumulate in double whatever T is
template <class T>
double sum(const T* x, int64_t n);
template <class T>
double sum_squares(const T* x, int64_t n);

// adamw.cpp: one fused pass over [0, n) of trainrun/core/adamw_update.h's element update
template <class T>
void adamw(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWStep<T>& s);

}  // namespace trainrun::cpu
