// Causal grouped-query self-attention with flash-attention semantics: the forward keeps only the
// row log-sum-exp (lse) of the scaled scores, never a T x T matrix, and the backward recomputes
// each probability as p = exp(s - lse).
//
// Layout: qkv [B,T,W], W = (NH + 2*NKV)*hd = (q | k | v); q head h is columns h*hd .. (h+1)*hd,
// k head g starts at NH*hd + g*hd, v head g at (NH + NKV)*hd + g*hd. q head h reads kv head
// g = h / (NH / NKV) (NKV = NH: multi-head attention, W = 3C). out [B,T,NH*hd] puts head h at
// q's columns. lse [B,NH,T]. scale = 1/sqrt(hd).
//
// Forward: each (b, t, h) query row is independent; rows run in parallel, each scores its t+1
// keys into a per-thread scratch row (grown once, thread_local), takes max and lse, then
// writes out = sum_j p_j v_j into its own slice of out.
// Backward: with D_t = dout_t . out_t (= sum_j p_tj dP_tj), dS_tj = p_tj (dP_tj - D_t) and
//   dq_t += scale sum_j dS_tj k_j,  dk_j += scale dS_tj q_t,  dv_j += p_tj dout_t.
// dk/dv gather over queries and over the q heads sharing a kv head, so threads own whole
// (b, kv head) pairs: every write to that kv head's columns (and its q heads') comes from one
// thread, no atomics, deterministic at any thread count.
//
// f32 runs the same math in blocks of kQueryBlock queries, as GEMMs (sgemm.h): for a block
// [t0, t1) of one head, S = Q K[0:t1]^T, P = exp(S scale - lse) with the causal mask, and then
// out = P V (forward), or dP = dO V^T, dS = P (dP - D) scale, dQ += dS K, dK += dS^T Q,
// dV += P^T dO (backward). The dot products of length hd become matrix products (the scalar
// loops ran at a fraction of the GEMM rate), at the cost of the masked upper half of each
// diagonal block. The scalar loops stay as the f64 path (gradient checks), which the tests hold
// the f32 path to.
//
// Document masking (doc_start, documents.h): query t sees keys [first_key(t), t]. The scalar
// loops start at first_key; a GEMM block of queries [t0, t1) takes keys [k0, t1), k0 the least
// first key of its rows, and masks each row's keys before its own first key as it masks those
// after t. Without doc_start k0 = 0 and every row's first key is 0: the plain causal block.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels.h"
#include "sgemm.h"
#include "simd_clones.h"
#include "trainrun/core/documents.h"
#include "vec_math.h"

namespace trainrun::cpu {

namespace {
struct Layout {
  int64_t W, k0, v0, C;  // row width, k and v column offsets, out width
};
Layout layout(int64_t hd, int NH, int NKV) {
  return {(NH + 2 * int64_t{NKV}) * hd, NH * hd, (NH + int64_t{NKV}) * hd, NH * hd};
}

constexpr int64_t kQueryBlock = 64;

// A thread's scratch of n floats, kept across calls (grown, never shrunk).
float* scratch(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// The keys of a block of queries [t0, t1) in batch row b: columns [0, t1 - k0) stand for keys
// [k0, t1), and query t0 + r sees the columns [lo(r), hi(r)).
struct BlockKeys {
  const int32_t* doc_start;
  int64_t b, T, t0, k0;
  int64_t lo(int64_t r) const { return first_key(doc_start, b, T, t0 + r) - k0; }
  int64_t hi(int64_t r) const { return t0 + r + 1 - k0; }
};

BlockKeys block_keys(const int32_t* doc_start, int64_t b, int64_t T, int64_t t0, int64_t t1) {
  int64_t k0 = t0;
  for (int64_t t = t0; t < t1; ++t) k0 = std::min(k0, first_key(doc_start, b, T, t));
  return {doc_start, b, T, t0, k0};
}

// P[r, j] = exp(S[r, j] scale - lse_t) for the keys j that query t = t0 + r sees, else 0; S is
// overwritten. With lse == nullptr the row's own log-sum-exp is taken first and written to
// lse_out.
TRAINRUN_AVX512_CLONES void causal_probabilities(float* S, int64_t rows, int64_t keys,
                                                 const BlockKeys& bk, float scale, const float* lse,
                                                 float* lse_out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = S + r * keys;
    const int64_t j0 = bk.lo(r), n = bk.hi(r);  // the keys this query sees
    for (int64_t j = 0; j < j0; ++j) s[j] = 0;
    if (lse) {
      const float l = lse[r];
#pragma omp simd
      for (int64_t j = j0; j < n; ++j) s[j] = exp_vec(s[j] * scale - l);
    } else {
      // One exp per score: e = exp(s - max) is stored and scaled by 1 / sum afterwards. The
      // max is a simd reduction: as a plain loop it was a scalar dependency chain that took
      // half of the forward's own time.
      float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
      for (int64_t j = j0; j < n; ++j) mx = std::max(mx, s[j] * scale);
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = j0; j < n; ++j) {
        s[j] = exp_vec(s[j] * scale - mx);
        sum += s[j];
      }
      lse_out[r] = mx + std::log(sum);
      const float inv = 1.0f / sum;
#pragma omp simd
      for (int64_t j = j0; j < n; ++j) s[j] *= inv;
    }
    for (int64_t j = n; j < keys; ++j) s[j] = 0;
  }
}

// dS[r, j] = P[r, j] (dP[r, j] - D_r) scale in place of dP, D_r = dout_r . out_r (row r of the
// block's dout and out, ld apart).
TRAINRUN_AVX512_CLONES void softmax_backward_rows(float* dS, const float* P, const float* dout,
                                                  const float* out, int64_t rows, int64_t keys,
                                                  int64_t hd, int64_t ld, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float D = 0;
#pragma omp simd reduction(+ : D)
    for (int64_t i = 0; i < hd; ++i) D += dout[r * ld + i] * out[r * ld + i];
    float* ds = dS + r * keys;
    const float* p = P + r * keys;
#pragma omp simd
    for (int64_t j = 0; j < keys; ++j) ds[j] = p[j] * (ds[j] - D) * scale;
  }
}

void attention_forward_f32(float* out, float* lse, const float* qkv, int64_t B, int64_t T_,
                           int64_t hd, int NH, int NKV, const int32_t* doc_start) {
  const Layout L = layout(hd, NH, NKV);
  const int64_t group = NH / NKV;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t blocks = (T_ + kQueryBlock - 1) / kQueryBlock;
#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        thread_local std::vector<float> buf;
        const int64_t t0 = blk * kQueryBlock, t1 = std::min(T_, t0 + kQueryBlock), M = t1 - t0;
        const int64_t g = h / group;
        const BlockKeys bk = block_keys(doc_start, b, T_, t0, t1);
        const int64_t K = t1 - bk.k0;
        const float* q = qkv + (b * T_ + t0) * L.W + h * hd;
        const float* k = qkv + (b * T_ + bk.k0) * L.W + L.k0 + g * hd;
        const float* v = qkv + (b * T_ + bk.k0) * L.W + L.v0 + g * hd;
        float* P = scratch(buf, M * K);
        sgemm('N', 'T', M, K, hd, q, L.W, k, L.W, 0.0f, P, K);
        causal_probabilities(P, M, K, bk, scale, nullptr, lse + (b * NH + h) * T_ + t0);
        sgemm('N', 'N', M, hd, K, P, K, v, L.W, 0.0f, out + (b * T_ + t0) * L.C + h * hd, L.C);
      }
    }
  }
}

void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int64_t B, int64_t T_, int64_t hd, int NH, int NKV,
                            const int32_t* doc_start) {
  const Layout L = layout(hd, NH, NKV);
  const int64_t group = NH / NKV;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < NKV; ++g) {
      thread_local std::vector<float> pbuf, dsbuf;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t t0 = 0; t0 < T_; t0 += kQueryBlock) {
          const int64_t t1 = std::min(T_, t0 + kQueryBlock), M = t1 - t0;
          const BlockKeys bk = block_keys(doc_start, b, T_, t0, t1);
          const int64_t K = t1 - bk.k0, krow0 = (b * T_ + bk.k0) * L.W;
          const float* k = qkv + krow0 + L.k0 + g * hd;
          const float* v = qkv + krow0 + L.v0 + g * hd;
          float* dk = dqkv + krow0 + L.k0 + g * hd;
          float* dv = dqkv + krow0 + L.v0 + g * hd;
          const int64_t row0 = b * T_ + t0;
          const float* q = qkv + row0 * L.W + h * hd;
          float* dq = dqkv + row0 * L.W + h * hd;
          const float* go = dout + row0 * L.C + h * hd;
          const float* o = out + row0 * L.C + h * hd;
          float* P = scratch(pbuf, M * K);
          float* dS = scratch(dsbuf, M * K);
          sgemm('N', 'T', M, K, hd, q, L.W, k, L.W, 0.0f, P, K);
          causal_probabilities(P, M, K, bk, scale, lse + (b * NH + h) * T_ + t0, nullptr);
          sgemm('N', 'T', M, K, hd, go, L.C, v, L.W, 0.0f, dS, K);  // dP
          softmax_backward_rows(dS, P, go, o, M, K, hd, L.C, scale);
          sgemm('N', 'N', M, hd, K, dS, K, k, L.W, 1.0f, dq, L.W);
          sgemm('T', 'N', K, hd, M, dS, K, q, L.W, 1.0f, dk, L.W);
          sgemm('T', 'N', K, hd, M, P, K, go, L.C, 1.0f, dv, L.W);
        }
      }
    }
  }
}

}  // namespace

template <class T>
void attention_forward(T* out, T* lse, const T* qkv, int64_t B, int64_t T_, int64_t hd, int NH,
                       int NKV, const int32_t* doc_start) {
  if constexpr (std::is_same_v<T, float>) {
    attention_forward_f32(out, lse, qkv, B, T_, hd, NH, NKV, doc_start);
    return;
  }
  const Layout L = layout(hd, NH, NKV);
  const int64_t group = NH / NKV;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel for collapse(3)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T_; ++t) {
        thread_local std::vector<T> scores;
        if (static_cast<int64_t>(scores.size()) < T_) scores.resize(T_);
        const int64_t g = h / group;
        const T* q = qkv + (b * T_ + t) * L.W + h * hd;
        const int64_t j0 = first_key(doc_start, b, T_, t);
        T mx = -INFINITY;
        for (int64_t j = j0; j <= t; ++j) {
          const T* k = qkv + (b * T_ + j) * L.W + L.k0 + g * hd;
          T s = 0;
          // simd reduction: lets the compiler vectorise the dot product (it may not reorder a
          // float sum on its own); the order is fixed, so results stay deterministic.
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < hd; ++i) s += q[i] * k[i];
          s *= scale;
          scores[j] = s;
          if (s > mx) mx = s;
        }
        T sum = 0;
        for (int64_t j = j0; j <= t; ++j) {
          scores[j] = std::exp(scores[j] - mx);
          sum += scores[j];
        }
        const T inv = 1 / sum;
        T* o = out + (b * T_ + t) * L.C + h * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] = 0;
        for (int64_t j = j0; j <= t; ++j) {
          const T p = scores[j] * inv;
          const T* v = qkv + (b * T_ + j) * L.W + L.v0 + g * hd;
#pragma omp simd
          for (int64_t i = 0; i < hd; ++i) o[i] += p * v[i];
        }
        lse[(b * NH + h) * T_ + t] = mx + std::log(sum);
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int64_t B,
                        int64_t T_, int64_t hd, int NH, int NKV, const int32_t* doc_start) {
  if constexpr (std::is_same_v<T, float>) {
    attention_backward_f32(dqkv, dout, qkv, out, lse, B, T_, hd, NH, NKV, doc_start);
    return;
  }
  const Layout L = layout(hd, NH, NKV);
  const int64_t group = NH / NKV;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < NKV; ++g) {
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t t = 0; t < T_; ++t) {
          const int64_t row = (b * T_ + t);
          const T* q = qkv + row * L.W + h * hd;
          T* dq = dqkv + row * L.W + h * hd;
          const T* go = dout + row * L.C + h * hd;
          const T* o = out + row * L.C + h * hd;
          const T l = lse[(b * NH + h) * T_ + t];
          T D = 0;
#pragma omp simd reduction(+ : D)
          for (int64_t i = 0; i < hd; ++i) D += go[i] * o[i];
          for (int64_t j = first_key(doc_start, b, T_, t); j <= t; ++j) {
            const int64_t krow = (b * T_ + j) * L.W;
            const T* k = qkv + krow + L.k0 + g * hd;
            const T* v = qkv + krow + L.v0 + g * hd;
            T* dk = dqkv + krow + L.k0 + g * hd;
            T* dv = dqkv + krow + L.v0 + g * hd;
            T s = 0, dp = 0;
#pragma omp simd reduction(+ : s, dp)
            for (int64_t i = 0; i < hd; ++i) {
              s += q[i] * k[i];
              dp += go[i] * v[i];
            }
            const T p = std::exp(s * scale - l);
            const T ds = p * (dp - D) * scale;
#pragma omp simd
            for (int64_t i = 0; i < hd; ++i) {
              dq[i] += ds * k[i];
              dk[i] += ds * q[i];
              dv[i] += p * go[i];
            }
          }
        }
      }
    }
  }
}

template void attention_forward<float>(float*, float*, const float*, int64_t, int64_t, int64_t, int,
                                       int, const int32_t*);
template void attention_forward<double>(double*, double*, const double*, int64_t, int64_t, int64_t,
                                        int, int, const int32_t*);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t, int64_t, int, int,
                                        const int32_t*);
template void attention_backward<double>(double*, const double*, const double*, const double*,
                                         const double*, int64_t, int64_t, int64_t, int, int,
                                         const int32_t*);

}  // namespace trainrun::cpu
