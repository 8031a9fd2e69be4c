// Causal grouped-query attention on tensor cores: bf16 in, f32 accumulation, flash-attention-2
// structure. The layout, the lse convention and the backward's three-kernel split (D, dQ, dK/dV:
// no atomics, deterministic) are attention.cu's; this file replaces its CUDA-core arithmetic for
// bf16 activations with head_dim 32, 64 or 128 (attention.cu dispatches; other head dims and f32
// stay there).
//
// Tiling: a block of 4 warps owns 64 rows (queries forward and for dQ, keys for dK/dV), 16 per
// warp, the m of one mma tile. The other side streams through shared memory 64 rows at a time.
// Every product is one of two warp-level shapes over bf16 tiles in shared memory (row stride
// hd + 8 elements, so the eight 16-byte rows of an ldmatrix hit different banks):
//   abt:  S[16 x 64]  = A[16 x hd] . M[64 x hd]^T   (A in registers, M streamed: ldmatrix)
//   pm:   O[16 x hd] += P[16 x 64] . M[64 x hd]     (P in registers, M streamed: ldmatrix.trans)
// and P goes from abt's accumulator to pm's A operand in registers: the m16n8 f32 accumulator of
// two neighbouring n tiles is exactly the m16k16 bf16 A fragment (kernels/mma.cuh's table).
//   forward  S = Q K^T, online softmax on S in registers, O += P V
//   dQ       S = Q K^T, dP = dO V^T, dS = P (dP - D), dQ += dS K
//   dK/dV    S^T = K Q^T, dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q
// Softmax runs in base 2 (exp2 of scores pre-multiplied by scale * log2 e, one FMA each); lse is
// stored in natural log as attention.cu stores it. P and dS are rounded to bf16 for the second
// product, as flash attention does; the gpu suite's bf16 tolerance covers it.
// Document masking (documents.h): query q sees keys first_key(q) <= k <= q. Each lane reads the
// first keys of its rows once (rows past T get one above every key: they see nothing); the forward
// and dQ start at the key tile holding the least first key of the block's queries, and dK/dV skip
// query tiles whose documents all start after the block's keys. A row may then see a whole tile
// masked before its first key; the forward's online softmax subtracts 0 instead of a max of -inf
// there (as flash attention does), so exp2 gives 0, never NaN. Without document starts every first
// key is 0: the causal mask.
#include <cmath>

#include <type_traits>

#include "attention.h"
#include "mma.cuh"
#include "trainrun/core/documents.h"

namespace trainrun::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // rows a block owns
constexpr int kCols = 64;           // rows of a streamed tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HD>
constexpr int kLd = HD + 8;  // shared-memory row stride in elements (16-byte multiple)

// The keys a lane's two rows (queries q and q + 8) see among those of a 16 x 64 score tile of keys
// from k0: the lane's element (j, e) is key k0 + 8j + 2t4 + e%2 of row e/2, kept when
// lo[e/2] <= 8j + e%2 <= hi[e/2]. Offsets from the lane's first key, in 32 bits.
struct SeenKeys {
  int lo[2], hi[2];
};
__device__ __forceinline__ SeenKeys seen_keys(const int (&fk)[2], int64_t q, int64_t k0, int t4) {
  const int64_t first = k0 + 2 * t4;
  SeenKeys k;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    k.lo[r] = static_cast<int>(fk[r] - first);  // <= kNoKey
    k.hi[r] = static_cast<int>(q + 8 * r - first);
  }
  return k;
}

// The least first key of queries [t0, t0 + 64) (kNoKey if none is before T), in every lane.
__device__ __forceinline__ int least_first_key(const AttentionGeometry& g, int64_t b, int64_t t0) {
  const int lane = threadIdx.x % 32;
  const int a = row_first_key(g, b, t0 + lane), c = row_first_key(g, b, t0 + 32 + lane);
  return warp_min(a < c ? a : c);
}

// Rows [t0, t0 + 64) of one head's slice (hd columns of a [*, ld] bf16 matrix) into shared memory;
// rows past T read as zero, so no 0xFF (NaN) byte ever enters a product.
template <int HD>
__device__ void load_rows(bf16* dst, const bf16* src, int64_t ld, int64_t t0, int64_t T_) {
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 && ld % 8 == 0;  // block-uniform
  for (int idx = threadIdx.x; idx < kCols * HD / 8; idx += blockDim.x) {
    const int r = idx / (HD / 8), c = idx % (HD / 8) * 8;
    const int64_t t = t0 + r;
    bf16* d = dst + r * kLd<HD> + c;
    if (t >= T_) {
      for (int i = 0; i < 8; ++i) d[i] = from_f32<bf16>(0.0f);
    } else if (vec) {
      copy16(d, src + t * ld + c);
    } else {
      for (int i = 0; i < 8; ++i) d[i] = src[t * ld + c + i];
    }
  }
}

// The warp's A operand: 16 rows x HD of a shared tile.
template <int HD>
__device__ void load_a(FragA (&a)[HD / 16], const bf16* rows16) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    ldmatrix_x4(a[kk].x, rows16 + (lane % 16) * kLd<HD> + kk * 16 + (lane / 16) * 8);
}

// s = a . M^T over the 64 streamed rows of M (s[j]: columns 8j .. 8j+7).
template <int HD>
__device__ void abt(FragC (&s)[8], const FragA (&a)[HD / 16], const bf16* M) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    s[j] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < HD / 32; ++kk) {
      // Matrix i of the x4: rows 8j .. 8j+7 of M, columns 32kk + 8i: B fragments of k steps
      // 2kk (registers 0, 1) and 2kk + 1 (registers 2, 3).
      uint32_t r[4];
      ldmatrix_x4(r, M + (8 * j + lane % 8) * kLd<HD> + 32 * kk + 8 * (lane / 8));
      mma_bf16(s[j], a[2 * kk], FragB{{r[0], r[1]}});
      mma_bf16(s[j], a[2 * kk + 1], FragB{{r[2], r[3]}});
    }
  }
}

// The accumulator of a 16 x 64 product as four bf16 A fragments (k = its 64 columns).
__device__ __forceinline__ void to_a(FragA (&a)[4], const FragC (&c)[8]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk].x[0] = pack_bf16(c[2 * kk].x[0], c[2 * kk].x[1]);
    a[kk].x[1] = pack_bf16(c[2 * kk].x[2], c[2 * kk].x[3]);
    a[kk].x[2] = pack_bf16(c[2 * kk + 1].x[0], c[2 * kk + 1].x[1]);
    a[kk].x[3] = pack_bf16(c[2 * kk + 1].x[2], c[2 * kk + 1].x[3]);
  }
}

// o += p . M over the 64 streamed rows of M (o[n]: columns 8n .. 8n+7 of HD).
template <int HD>
__device__ void pm(FragC (&o)[HD / 8], const FragA (&p)[4], const bf16* M) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      // Matrix i: rows 16kk + 8(i % 2) .. +7 of M, columns 16n + 8(i / 2), transposed: B
      // fragments of column tiles 2n (registers 0, 1) and 2n + 1 (registers 2, 3).
      uint32_t r[4];
      ldmatrix_x4_trans(r, M + (16 * kk + lane % 16) * kLd<HD> + 16 * n + 8 * (lane / 16));
      mma_bf16(o[2 * n], p[kk], FragB{{r[0], r[1]}});
      mma_bf16(o[2 * n + 1], p[kk], FragB{{r[2], r[3]}});
    }
}

// A row's value reduced over the four lanes that share it (lanes 4g .. 4g+3).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// dst[row, c .. c+1] (+)= scale * (v0, v1) for an accumulator's two columns of one row: added
// to, or stored without reading dst (g.accumulate false).
__device__ __forceinline__ void add_pair(const AttentionGeometry& g, bf16* dst, float scale,
                                         float v0, float v1) {
  dst[0] = from_f32<bf16>(grad_base(g, dst) + scale * v0);
  dst[1] = from_f32<bf16>(grad_base(g, dst + 1) + scale * v1);
}

template <int HD, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_tc_forward_kernel(bf16* out, S* lse, const bf16* qkv, AttentionGeometry g) {
  TRAINRUN_DYNAMIC_SHARED(bf16, smem);
  bf16* Qs = smem;                  // [64][HD + 8]
  bf16* Ks = Qs + kRows * kLd<HD>;  // [64][HD + 8]
  bf16* Vs = Ks + kCols * kLd<HD>;  // [64][HD + 8]
  const int64_t bh = grid_row(), b = bh / g.NH, h = bh % g.NH, kvh = h / g.group;
  if (bh >= g.B * g.NH) return;  // past B x heads in the last grid.z layer
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const bf16* row0 = qkv + b * g.T * g.W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t4 = lane % 4;
  const int64_t wq0 = q0 + 16 * warp;  // the warp's first query
  const float c = g.scale * kLog2e;

  load_rows<HD>(Qs, row0 + h * HD, g.W, q0, g.T);
  __syncthreads();
  FragA qf[HD / 16];
  load_a<HD>(qf, Qs + 16 * warp * kLd<HD>);

  FragC o[HD / 8];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows gr and gr + 8, base 2
  const int fk[2] = {row_first_key(g, b, wq0 + gr), row_first_key(g, b, wq0 + gr + 8)};
  const int warp_fk = warp_min(fk[0] < fk[1] ? fk[0] : fk[1]);

  const int64_t last_key = q0 + kRows - 1 < g.T ? q0 + kRows - 1 : g.T - 1;
  for (int64_t k0 = least_first_key(g, b, q0) / kCols * kCols; k0 <= last_key; k0 += kCols) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_rows<HD>(Ks, row0 + g.k_col + kvh * HD, g.W, k0, g.T);
    load_rows<HD>(Vs, row0 + g.v_col + kvh * HD, g.W, k0, g.T);
    __syncthreads();
    if (k0 > wq0 + 15) continue;  // every key of the tile is after the warp's queries (uniform)
    if (k0 + kCols <= warp_fk) continue;  // ... or before their documents (uniform)
    FragC s[8];
    abt<HD>(s, qf, Ks);
    const SeenKeys sk = seen_keys(fk, wq0 + gr, k0, t4);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + e % 2;
        s[j].x[e] = sk.lo[e / 2] <= col && col <= sk.hi[e / 2] ? s[j].x[e] * c : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j].x[e]);
      }
    float alpha[2], m_sub[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // -inf while the row has seen no key (its document starts after this tile): subtract 0
      // then, so exp2 gives 0 and never -inf - -inf = NaN.
      const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
      m_sub[r] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[r] = exp2f(m[r] - m_sub[r]);  // 0 on the row's first tile (m = -inf)
      m[r] = m_new;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j].x[e] = exp2f(s[j].x[e] - m_sub[e / 2]);  // masked: exp2(-inf) = 0
        l[e / 2] += s[j].x[e];                        // this lane's part of the row sum
      }
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n].x[e] *= alpha[e / 2];
    FragA p[4];
    to_a(p, s);
    pm<HD>(o, p, Vs);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t qi = wq0 + gr + 8 * r;
    const float row_l = quad_sum(l[r]);
    if (qi >= g.T) continue;
    bf16* orow = out + (b * g.T + qi) * g.C + h * HD;
    const float inv = 1.0f / row_l;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      orow[8 * n + 2 * t4] = from_f32<bf16>(o[n].x[2 * r] * inv);
      orow[8 * n + 2 * t4 + 1] = from_f32<bf16>(o[n].x[2 * r + 1] * inv);
    }
    if (t4 == 0) lse[bh * g.T + qi] = from_f32<S>((m[r] + log2f(row_l)) * kLn2);
  }
}

template <int HD, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_tc_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const S* lse,
                           const float* D, AttentionGeometry g) {
  TRAINRUN_DYNAMIC_SHARED(bf16, smem);
  bf16* Qs = smem;                   // [64][HD + 8]
  bf16* dOs = Qs + kRows * kLd<HD>;  // [64][HD + 8]
  bf16* Ks = dOs + kRows * kLd<HD>;  // [64][HD + 8]
  bf16* Vs = Ks + kCols * kLd<HD>;   // [64][HD + 8]
  const int64_t bh = grid_row(), b = bh / g.NH, h = bh % g.NH, kvh = h / g.group;
  if (bh >= g.B * g.NH) return;  // past B x heads in the last grid.z layer
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const bf16* row0 = qkv + b * g.T * g.W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t4 = lane % 4;
  const int64_t wq0 = q0 + 16 * warp;
  const float c = g.scale * kLog2e;

  load_rows<HD>(Qs, row0 + h * HD, g.W, q0, g.T);
  load_rows<HD>(dOs, dout + b * g.T * g.C + h * HD, g.C, q0, g.T);
  __syncthreads();
  float lse2[2], Dr[2];  // rows gr and gr + 8: lse in base 2, D, first key (kNoKey past T)
  int fk[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t qi = wq0 + gr + 8 * r;
    lse2[r] = qi < g.T ? to_f32(lse[bh * g.T + qi]) * kLog2e : 0.0f;
    Dr[r] = qi < g.T ? D[bh * g.T + qi] : 0.0f;
    fk[r] = row_first_key(g, b, qi);
  }
  const int warp_fk = warp_min(fk[0] < fk[1] ? fk[0] : fk[1]);
  FragC dq[HD / 8];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) dq[n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};

  const int64_t last_key = q0 + kRows - 1 < g.T ? q0 + kRows - 1 : g.T - 1;
  for (int64_t k0 = least_first_key(g, b, q0) / kCols * kCols; k0 <= last_key; k0 += kCols) {
    __syncthreads();
    load_rows<HD>(Ks, row0 + g.k_col + kvh * HD, g.W, k0, g.T);
    load_rows<HD>(Vs, row0 + g.v_col + kvh * HD, g.W, k0, g.T);
    __syncthreads();
    if (k0 > wq0 + 15 || k0 + kCols <= warp_fk) continue;  // no key the warp's queries see
    // The warp's Q and dO rows are read again from shared memory for each tile rather than held:
    // registers go to the accumulators (hd 128: dq alone is 64 floats a lane).
    FragC s[8], dp[8];
    FragA a[HD / 16];
    load_a<HD>(a, Qs + 16 * warp * kLd<HD>);
    abt<HD>(s, a, Ks);
    load_a<HD>(a, dOs + 16 * warp * kLd<HD>);
    abt<HD>(dp, a, Vs);
    const SeenKeys sk = seen_keys(fk, wq0 + gr, k0, t4);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, col = 8 * j + e % 2;
        const float p = sk.lo[r] <= col && col <= sk.hi[r] ? exp2f(s[j].x[e] * c - lse2[r]) : 0.0f;
        s[j].x[e] = p * (dp[j].x[e] - Dr[r]);  // dS
      }
    FragA ds[4];
    to_a(ds, s);
    pm<HD>(dq, ds, Ks);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t qi = wq0 + gr + 8 * r;
    if (qi >= g.T) continue;
    bf16* dst = dqkv + (b * g.T + qi) * g.W + h * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n)
      add_pair(g, dst + 8 * n + 2 * t4, g.scale, dq[n].x[2 * r], dq[n].x[2 * r + 1]);
  }
}

template <int HD, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_tc_dkv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const S* lse,
                            const float* D, AttentionGeometry g) {
  TRAINRUN_DYNAMIC_SHARED(bf16, smem);
  bf16* Ks = smem;                   // [64][HD + 8]  the block's keys
  bf16* Vs = Ks + kRows * kLd<HD>;   // [64][HD + 8]
  bf16* Qs = Vs + kRows * kLd<HD>;   // [64][HD + 8]  streamed queries
  bf16* dOs = Qs + kCols * kLd<HD>;  // [64][HD + 8]
  float* lse2_s = reinterpret_cast<float*>(dOs + kCols * kLd<HD>);  // [64] base 2
  float* D_s = lse2_s + kCols;                                      // [64]
  int* fk_s = reinterpret_cast<int*>(D_s + kCols);                  // [64] first keys
  const int64_t bkv = grid_row(), b = bkv / g.NKV, kvh = bkv % g.NKV;
  if (bkv >= g.B * g.NKV) return;
  const int64_t k0 = int64_t(blockIdx.x) * kRows;
  const bf16* row0 = qkv + b * g.T * g.W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t4 = lane % 4;
  const int64_t wk0 = k0 + 16 * warp;  // the warp's first key
  const float c = g.scale * kLog2e;

  load_rows<HD>(Ks, row0 + g.k_col + kvh * HD, g.W, k0, g.T);
  load_rows<HD>(Vs, row0 + g.v_col + kvh * HD, g.W, k0, g.T);
  FragC dk[HD / 8], dv[HD / 8];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) dk[n] = dv[n] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};

  for (int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    const int64_t bh = b * g.NH + h;
    for (int64_t q0 = k0; q0 < g.T; q0 += kCols) {
      // The tile's queries whose documents start after the block's keys see none of them; the
      // tile is skipped when that is all of them (the same in every warp).
      const int least = least_first_key(g, b, q0);
      if (least >= k0 + kRows) continue;
      __syncthreads();
      load_rows<HD>(Qs, row0 + h * HD, g.W, q0, g.T);
      load_rows<HD>(dOs, dout + b * g.T * g.C + h * HD, g.C, q0, g.T);
      if (threadIdx.x < kCols) {
        const int64_t t = q0 + threadIdx.x;
        lse2_s[threadIdx.x] = t < g.T ? to_f32(lse[bh * g.T + t]) * kLog2e : 0.0f;
        D_s[threadIdx.x] = t < g.T ? D[bh * g.T + t] : 0.0f;
        fk_s[threadIdx.x] = row_first_key(g, b, t);  // kNoKey past T
      }
      __syncthreads();
      if (least > wk0 + 15) continue;  // none of them sees the warp's keys (uniform)
      FragC st[8], dpt[8];             // S^T and dP^T: the warp's 16 keys x 64 queries
      FragA a[HD / 16];                // the warp's K, then V rows (read again per tile, as in dQ)
      load_a<HD>(a, Ks + 16 * warp * kLd<HD>);
      abt<HD>(st, a, Qs);
      load_a<HD>(a, Vs + 16 * warp * kLd<HD>);
      abt<HD>(dpt, a, dOs);
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 8 * j + 2 * t4 + e % 2;  // query q0 + i
          const int kj = static_cast<int>(wk0 + gr + 8 * (e / 2)), qi = static_cast<int>(q0 + i);
          const float p = fk_s[i] <= kj && kj <= qi ? exp2f(st[j].x[e] * c - lse2_s[i]) : 0.0f;
          st[j].x[e] = p;
          dpt[j].x[e] = p * (dpt[j].x[e] - D_s[i]);  // dS^T
        }
      FragA pa[4], dsa[4];
      to_a(pa, st);
      to_a(dsa, dpt);
      pm<HD>(dv, pa, dOs);
      pm<HD>(dk, dsa, Qs);
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t kj = wk0 + gr + 8 * r;
    if (kj >= g.T) continue;
    bf16* dk_row = dqkv + (b * g.T + kj) * g.W + g.k_col + kvh * HD;
    bf16* dv_row = dqkv + (b * g.T + kj) * g.W + g.v_col + kvh * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      add_pair(g, dk_row + 8 * n + 2 * t4, g.scale, dk[n].x[2 * r], dk[n].x[2 * r + 1]);
      add_pair(g, dv_row + 8 * n + 2 * t4, 1.0f, dv[n].x[2 * r], dv[n].x[2 * r + 1]);
    }
  }
}

template <class F>
void by_head_dim(int hd, F&& f) {
  if (hd == 32)
    f(std::integral_constant<int, 32>{});
  else if (hd == 64)
    f(std::integral_constant<int, 64>{});
  else
    f(std::integral_constant<int, 128>{});
}

template <class F>
void by_stat_dtype(DType st, F&& f) {
  if (st == DType::f32)
    f(float{});
  else
    f(bf16{});
}

size_t tile_bytes(int hd) {
  return sizeof(bf16) * static_cast<size_t>(kRows) * static_cast<size_t>(hd + 8);
}

}  // namespace

bool attention_tc_supports(DType dt, int64_t hd) {
  return dt == DType::bf16 && (hd == 32 || hd == 64 || hd == 128);
}

void attention_tc_forward(DType st, void* out, void* lse, const void* qkv, int64_t B,
                          const AttentionGeometry& g) {
  const dim3 grid = grid_over(static_cast<unsigned>((g.T + kRows - 1) / kRows), B * g.NH);
  const size_t smem = 3 * tile_bytes(g.hd);
  by_head_dim(g.hd, [&](auto hd) {
    by_stat_dtype(st, [&](auto s) {
      using S = decltype(s);
      constexpr int HD = decltype(hd)::value;
      allow_smem(attention_tc_forward_kernel<HD, S>, smem, "attention_tc_forward");
      TRAINRUN_LAUNCH(grid, kWarps * 32, smem, attention_tc_forward_kernel<HD, S>)
      (static_cast<bf16*>(out), static_cast<S*>(lse), static_cast<const bf16*>(qkv), g);
    });
  });
  check_launch("attention_tc_forward");
}

void attention_tc_backward(DType st, void* dqkv, const void* dout, const void* qkv, const void* lse,
                           const float* D, int64_t B, const AttentionGeometry& g) {
  const unsigned tiles = static_cast<unsigned>((g.T + kRows - 1) / kRows);
  const size_t smem_dq = 4 * tile_bytes(g.hd);
  const size_t smem_dkv = smem_dq + 2 * kCols * sizeof(float) + kCols * sizeof(int);
  by_head_dim(g.hd, [&](auto hd) {
    by_stat_dtype(st, [&](auto s) {
      using S = decltype(s);
      constexpr int HD = decltype(hd)::value;
      allow_smem(attention_tc_dq_kernel<HD, S>, smem_dq, "attention_tc_dq");
      TRAINRUN_LAUNCH(grid_over(tiles, B * g.NH), kWarps * 32, smem_dq,
                      attention_tc_dq_kernel<HD, S>)
      (static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), static_cast<const bf16*>(qkv),
       static_cast<const S*>(lse), D, g);
      allow_smem(attention_tc_dkv_kernel<HD, S>, smem_dkv, "attention_tc_dkv");
      TRAINRUN_LAUNCH(grid_over(tiles, B * g.NKV), kWarps * 32, smem_dkv,
                      attention_tc_dkv_kernel<HD, S>)
      (static_cast<bf16*>(dqkv), static_cast<const bf16*>(dout), static_cast<const bf16*>(qkv),
       static_cast<const S*>(lse), D, g);
    });
  });
  check_launch("attention_tc_backward");
}

}  // namespace trainrun::cuda
