// Causal grouped-query self-attention, flash-attention-2 style, fp32 arithmetic on CUDA cores:
// f32 activations, and bf16 where attention_tc.cu's tensor-core kernels do not apply (head_dim
// other than 32, 64 and 128). No T x T matrix anywhere in global memory.
//
// Layout (as include/trainrun/backend/backend.h): qkv [B,T,W], W = (NH + 2*NKV)*hd = (q | k | v); q
// head h at columns h*hd .. (h+1)*hd, k head g at NH*hd + g*hd, v head g at (NH+NKV)*hd + g*hd; q
// head h reads kv head g = h / (NH/NKV) (NKV = NH: multi-head, W = 3C). out [B,T,C], C = NH*hd; lse
// [B,NH,T] = logsumexp_j(q.k_j * scale), scale = 1/sqrt(hd).
//
// Tiling: a block owns one (b, h) and a tile of kTile = 32 rows (queries forward and for dQ, keys
// for dK/dV); each of its 8 warps owns 4 of those rows. The other side (keys, or queries) streams
// through shared memory kTile rows at a time, converted to fp32 once on load. Within a warp, lane
// j works on streamed row j for the dot products (scores), then lanes switch to owning head dims
// d = lane + 32k (k < 4, so hd <= 128) to accumulate outputs, with the per-row weights passed by
// __shfl_sync. Rows a lane reads across the warp are padded to hd+1 floats so those reads hit 32
// different banks; rows read as a warp-wide broadcast are not padded.
//
// Forward: online softmax. Per query row: running max m, running sum l, accumulator o. For each
// key tile: m' = max(m, tile max), alpha = exp(m - m'), l = l*alpha + sum p, o = o*alpha + P.V.
// Document masking (documents.h): query q sees keys [first_key(q), q]. Key tiles stay aligned to
// query tiles and start at the tile holding the least first key of the block's queries; a row
// whose document starts after a tile sees none of its keys there (its max is still -inf) and
// skips the tile, so no -inf - -inf NaN can arise. Without document starts every first key is 0:
// the plain causal mask, every tile from 0 holding a key the row sees.
// Backward (three kernels, no atomics, deterministic; the same mask per score):
//   D_q = dout_q . out_q                        (attention_delta_kernel)
//   p = exp(s - lse_q), dS = p (dout_q . v_k - D_q)
//   dQ_q += scale sum_k dS k_k                  (attention_dq_kernel: grid over query tiles)
//   dK_k += scale sum_q dS q_q, dV_k += sum_q p dout_q   (attention_dkv_kernel: key tiles)
// P is recomputed twice (once per kernel); that costs FLOPs but no atomics and no big buffers.
// Under GQA a kv head's dK/dV sum over the NH/NKV q heads sharing it: the dkv kernel's block owns
// one (b, kv head) key tile and walks those q heads in turn, still without atomics.
#include <cmath>
#include <cstdlib>
#include <string>

#include "attention.h"
#include "common.cuh"
#include "launch.h"
#include "trainrun/core/documents.h"

namespace trainrun::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kWarps = 8;
constexpr int kRowsPerWarp = kTile / kWarps;             // 4
constexpr int kDimsPerLane = kAttentionMaxHeadDim / 32;  // 4

using Geometry = AttentionGeometry;

static_assert(kTile == 32, "a lane holds one row of a tile (first keys, scores)");
// The first key of each of the warp's rows (lane i read query q0 + i's), and the first key tile
// the block visits: the one holding the least first key of its queries (the same in every warp).
struct TileFirstKeys {
  int row[kRowsPerWarp];
  int64_t k_begin;
};
__device__ __forceinline__ TileFirstKeys tile_first_keys(const Geometry& g, int64_t b, int64_t q0) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int fk = row_first_key(g, b, q0 + lane);
  TileFirstKeys t;
  t.k_begin = int64_t{warp_min(fk)} / kTile * kTile;  // row q0 < T, so the min is a key
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
    t.row[rr] = __shfl_sync(0xffffffffu, fk, warp * kRowsPerWarp + rr);
  return t;
}

// Loads rows [t0, t0+kTile) of one head's slice (columns `col0` .. +hd of a [B*T, ld] matrix)
// into fp32 shared memory with row stride `stride`; rows past T read as zero.
template <class T>
__device__ void load_tile(float* dst, int stride, const T* src, int64_t ld, int64_t t0, int64_t T_,
                          int hd) {
  for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx % hd;
    const int64_t t = t0 + r;
    dst[r * stride + d] = t < T_ ? to_f32(src[t * ld + d]) : 0.0f;
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(T* out, S* lse, const T* qkv, Geometry g) {
  TRAINRUN_DYNAMIC_SHARED(float, smem);
  const int hd = g.hd;
  float* Qs = smem;                   // [kTile][hd]     broadcast reads
  float* Ks = Qs + kTile * hd;        // [kTile][hd + 1] lane j reads row j
  float* Vs = Ks + kTile * (hd + 1);  // [kTile][hd]     lanes read along d
  const int64_t bh = grid_row(), b = bh / g.NH, h = bh % g.NH, kvh = h / g.group;
  if (bh >= g.B * g.NH) return;  // past B x heads in the last grid.z layer
  const int64_t q0 = int64_t(blockIdx.x) * kTile;
  const T* qbase = qkv + b * g.T * g.W + h * hd;
  const T* kbase = qkv + b * g.T * g.W + g.k_col + kvh * hd;
  const T* vbase = qkv + b * g.T * g.W + g.v_col + kvh * hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(Qs, hd, qbase, g.W, q0, g.T, hd);
  const TileFirstKeys fk = tile_first_keys(g, b, q0);

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) o[rr][k] = 0.0f;
  }

  const int64_t last_key = (q0 + kTile - 1 < g.T ? q0 + kTile - 1 : g.T - 1);
  for (int64_t k0 = fk.k_begin; k0 <= last_key; k0 += kTile) {
    __syncthreads();  // everyone is done with the previous K/V tile
    load_tile(Ks, hd + 1, kbase, g.W, k0, g.T, hd);
    load_tile(Vs, hd, vbase, g.W, k0, g.T, hd);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t qi = q0 + r;
      if (qi >= g.T) continue;  // warp-uniform
      const int64_t kj = k0 + lane;
      const bool seen = fk.row[rr] <= kj && kj <= qi;
      float s = -INFINITY;
      if (seen) {
        float acc = 0.0f;
        for (int d = 0; d < hd; ++d) acc += Qs[r * hd + d] * Ks[lane * (hd + 1) + d];
        s = acc * g.scale;
      }
      const float m_new = fmaxf(m[rr], warp_max(s));
      if (m_new == -INFINITY) continue;  // the row's document starts after this tile (uniform)
      const float p = seen ? expf(s - m_new) : 0.0f;
      const float alpha = expf(m[rr] - m_new);  // 0 on the row's first tile (m = -inf)
      l[rr] = l[rr] * alpha + warp_sum(p);
      m[rr] = m_new;
#pragma unroll
      for (int k = 0; k < kDimsPerLane; ++k) o[rr][k] *= alpha;
      const int jmin = static_cast<int>(fk.row[rr] > k0 ? fk.row[rr] - k0 : 0);
      const int jmax = static_cast<int>(qi - k0 + 1 < kTile ? qi - k0 + 1 : kTile);
      for (int j = jmin; j < jmax; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < hd) o[rr][k] += pj * Vs[j * hd + d];
        }
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t qi = q0 + warp * kRowsPerWarp + rr;
    if (qi >= g.T) continue;
    T* orow = out + (b * g.T + qi) * g.C + h * hd;
    const float inv = 1.0f / l[rr];
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hd) orow[d] = from_f32<T>(o[rr][k] * inv);
    }
    if (lane == 0) lse[bh * g.T + qi] = from_f32<S>(m[rr] + logf(l[rr]));
  }
}

// D[b,h,t] = dout[b,t,h,:] . out[b,t,h,:], one warp per (b, t, h).
template <class T>
__global__ void attention_delta_kernel(float* D, const T* dout, const T* out, int64_t B,
                                       Geometry g) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;  // (b*T + t)*NH + h
  if (row >= B * g.T * g.NH) return;
  const int64_t h = row % g.NH, bt = row / g.NH, b = bt / g.T, t = bt % g.T;
  const T* go = dout + bt * g.C + h * g.hd;
  const T* o = out + bt * g.C + h * g.hd;
  float acc = 0.0f;
  for (int d = lane; d < g.hd; d += 32) acc += to_f32(go[d]) * to_f32(o[d]);
  acc = warp_sum(acc);
  if (lane == 0) D[(b * g.NH + h) * g.T + t] = acc;
}

// dQ for a tile of queries, streaming key tiles from the least first key's to the diagonal.
template <class T, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const S* lse, const float* D,
                        Geometry g) {
  TRAINRUN_DYNAMIC_SHARED(float, smem);
  const int hd = g.hd;
  float* Qs = smem;                   // [kTile][hd]     broadcast
  float* dOs = Qs + kTile * hd;       // [kTile][hd]     broadcast
  float* Ks = dOs + kTile * hd;       // [kTile][hd + 1] lane j reads row j; lanes along d
  float* Vs = Ks + kTile * (hd + 1);  // [kTile][hd + 1] lane j reads row j
  const int64_t bh = grid_row(), b = bh / g.NH, h = bh % g.NH, kvh = h / g.group;
  if (bh >= g.B * g.NH) return;  // past B x heads in the last grid.z layer
  const int64_t q0 = int64_t(blockIdx.x) * kTile;
  const T* qbase = qkv + b * g.T * g.W + h * hd;
  const T* kbase = qkv + b * g.T * g.W + g.k_col + kvh * hd;
  const T* vbase = qkv + b * g.T * g.W + g.v_col + kvh * hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(Qs, hd, qbase, g.W, q0, g.T, hd);
  load_tile(dOs, hd, dout + b * g.T * g.C + h * hd, g.C, q0, g.T, hd);
  const TileFirstKeys fk = tile_first_keys(g, b, q0);

  float row_lse[kRowsPerWarp], row_D[kRowsPerWarp], dq[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t qi = q0 + warp * kRowsPerWarp + rr;
    row_lse[rr] = qi < g.T ? to_f32(lse[bh * g.T + qi]) : 0.0f;
    row_D[rr] = qi < g.T ? D[bh * g.T + qi] : 0.0f;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) dq[rr][k] = 0.0f;
  }

  const int64_t last_key = (q0 + kTile - 1 < g.T ? q0 + kTile - 1 : g.T - 1);
  for (int64_t k0 = fk.k_begin; k0 <= last_key; k0 += kTile) {
    __syncthreads();
    load_tile(Ks, hd + 1, kbase, g.W, k0, g.T, hd);
    load_tile(Vs, hd + 1, vbase, g.W, k0, g.T, hd);
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const int64_t qi = q0 + r;
      if (qi >= g.T) continue;
      const int64_t kj = k0 + lane;
      float ds = 0.0f;
      if (fk.row[rr] <= kj && kj <= qi) {
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < hd; ++d) {
          s += Qs[r * hd + d] * Ks[lane * (hd + 1) + d];
          dp += dOs[r * hd + d] * Vs[lane * (hd + 1) + d];
        }
        const float p = expf(s * g.scale - row_lse[rr]);
        ds = p * (dp - row_D[rr]);
      }
      const int jmin = static_cast<int>(fk.row[rr] > k0 ? fk.row[rr] - k0 : 0);
      const int jmax = static_cast<int>(qi - k0 + 1 < kTile ? qi - k0 + 1 : kTile);
      for (int j = jmin; j < jmax; ++j) {
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
          const int d = lane + 32 * k;
          if (d < hd) dq[rr][k] += dsj * Ks[j * (hd + 1) + d];
        }
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t qi = q0 + warp * kRowsPerWarp + rr;
    if (qi >= g.T) continue;
    T* dst = dqkv + (b * g.T + qi) * g.W + h * hd;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hd) dst[d] = from_f32<T>(grad_base(g, dst + d) + g.scale * dq[rr][k]);
    }
  }
}

// dK and dV for a tile of keys of one kv head, streaming, for each q head sharing it, the query
// tiles from the diagonal to T; a tile none of whose queries sees a key of the block (their
// documents start after it) is skipped.
template <class T, class S>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const S* lse, const float* D,
                         Geometry g) {
  TRAINRUN_DYNAMIC_SHARED(float, smem);
  const int hd = g.hd;
  float* Ks = smem;                       // [kTile][hd]     broadcast
  float* Vs = Ks + kTile * hd;            // [kTile][hd]     broadcast
  float* Qs = Vs + kTile * hd;            // [kTile][hd + 1] lane i reads row i; lanes along d
  float* dOs = Qs + kTile * (hd + 1);     // [kTile][hd + 1] same
  float* lse_s = dOs + kTile * (hd + 1);  // [kTile]
  float* D_s = lse_s + kTile;             // [kTile]
  int* fk_s = reinterpret_cast<int*>(D_s + kTile);  // [kTile] first keys (kNoKey past T)
  const int64_t bkv = grid_row(), b = bkv / g.NKV, kvh = bkv % g.NKV;
  if (bkv >= g.B * g.NKV) return;
  const int64_t k0 = int64_t(blockIdx.x) * kTile;
  const T* row0 = qkv + b * g.T * g.W;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  load_tile(Ks, hd, row0 + g.k_col + kvh * hd, g.W, k0, g.T, hd);
  load_tile(Vs, hd, row0 + g.v_col + kvh * hd, g.W, k0, g.T, hd);

  float dk[kRowsPerWarp][kDimsPerLane], dv[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) dk[rr][k] = dv[rr][k] = 0.0f;

  for (int64_t h = kvh * g.group; h < (kvh + 1) * g.group; ++h) {
    const int64_t bh = b * g.NH + h;
    const T* qbase = row0 + h * hd;
    const T* dbase = dout + b * g.T * g.C + h * hd;
    for (int64_t q0 = k0; q0 < g.T; q0 += kTile) {
      const int fk = row_first_key(g, b, q0 + lane);  // lane i: query q0 + i's first key
      if (warp_min(fk) >= k0 + kTile) continue;       // the same in every warp
      __syncthreads();
      load_tile(Qs, hd + 1, qbase, g.W, q0, g.T, hd);
      load_tile(dOs, hd + 1, dbase, g.C, q0, g.T, hd);
      if (threadIdx.x < kTile) {
        const int64_t t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < g.T ? to_f32(lse[bh * g.T + t]) : 0.0f;
        D_s[threadIdx.x] = t < g.T ? D[bh * g.T + t] : 0.0f;
        fk_s[threadIdx.x] = fk;  // warp 0's lanes
      }
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr;
        const int64_t kj = k0 + r;
        if (kj >= g.T) continue;  // warp-uniform
        const int64_t qi = q0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (fk_s[lane] <= kj && kj <= qi) {
          float s = 0.0f, dp = 0.0f;
          for (int d = 0; d < hd; ++d) {
            s += Qs[lane * (hd + 1) + d] * Ks[r * hd + d];
            dp += dOs[lane * (hd + 1) + d] * Vs[r * hd + d];
          }
          p = expf(s * g.scale - lse_s[lane]);
          ds = p * (dp - D_s[lane]);
        }
        const int ilo = static_cast<int>(kj > q0 ? kj - q0 : 0);
        const int ihi = static_cast<int>(g.T - q0 < kTile ? g.T - q0 : kTile);
        for (int i = 0; i < kTile; ++i) {
          // Every lane takes part in the shuffles; only rows in [ilo, ihi) contribute (p = ds = 0
          // elsewhere anyway, the bounds just skip the work).
          const float pi = __shfl_sync(0xffffffffu, p, i);
          const float dsi = __shfl_sync(0xffffffffu, ds, i);
          if (i < ilo || i >= ihi) continue;
#pragma unroll
          for (int k = 0; k < kDimsPerLane; ++k) {
            const int d = lane + 32 * k;
            if (d < hd) {
              dv[rr][k] += pi * dOs[i * (hd + 1) + d];
              dk[rr][k] += dsi * Qs[i * (hd + 1) + d];
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t kj = k0 + warp * kRowsPerWarp + rr;
    if (kj >= g.T) continue;
    T* dk_row = dqkv + (b * g.T + kj) * g.W + g.k_col + kvh * hd;
    T* dv_row = dqkv + (b * g.T + kj) * g.W + g.v_col + kvh * hd;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < hd) {
        dk_row[d] = from_f32<T>(grad_base(g, dk_row + d) + g.scale * dk[rr][k]);
        dv_row[d] = from_f32<T>(grad_base(g, dv_row + d) + dv[rr][k]);
      }
    }
  }
}

Geometry geometry(int64_t T_, int64_t hd, int NH, int NKV) {
  Geometry g;
  g.T = T_;
  g.C = NH * hd;
  g.W = (NH + 2 * int64_t{NKV}) * hd;
  g.k_col = NH * hd;
  g.v_col = (NH + int64_t{NKV}) * hd;
  g.NH = NH;
  g.NKV = NKV;
  g.group = NH / NKV;
  g.hd = static_cast<int>(hd);
  g.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  return g;
}

void check_geometry(const Geometry& g, const char* op) {
  if (g.hd < 1 || g.hd > kAttentionMaxHeadDim)
    throw DeviceError(std::string(op) + ": head_dim " + std::to_string(g.hd) +
                      " is outside the CUDA kernel's 1.." + std::to_string(kAttentionMaxHeadDim));
}

// TRAINRUN_CUDA_ATTENTION=cuda_cores keeps bf16 on this file's kernels, so bench/gpu_check.sh
// can time both paths side by side on one GPU.
// Read once when the plugin loads (a namespace-scope constant: no guarded static).
const bool kCudaCoresOnly = [] {
  const char* e = std::getenv("TRAINRUN_CUDA_ATTENTION");
  return e != nullptr && std::string(e) == "cuda_cores";
}();

bool tensor_cores(DType dt, int64_t hd) {
  return !kCudaCoresOnly && attention_tc_supports(dt, hd);
}

}  // namespace

void attention_forward(DType dt, DType st, void* out, void* lse, const void* qkv, int64_t B,
                       int64_t T_, int64_t hd, int NH, int NKV, const int32_t* doc_start) {
  if (B <= 0 || T_ <= 0) return;
  Geometry g = geometry(T_, hd, NH, NKV);
  g.doc_start = doc_start;
  g.B = B;
  check_geometry(g, "attention");
  if (tensor_cores(dt, hd)) {
    attention_tc_forward(st, out, lse, qkv, B, g);
    return;
  }
  const dim3 grid = grid_over(static_cast<unsigned>((T_ + kTile - 1) / kTile), B * NH);
  const size_t smem = sizeof(float) * (kTile * g.hd * 2 + kTile * (g.hd + 1));
  by_dtypes(dt, st, "attention", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    allow_smem(attention_forward_kernel<T, S>, smem, "attention_forward");
    TRAINRUN_LAUNCH(grid, kWarps * 32, smem, attention_forward_kernel<T, S>)
    (static_cast<T*>(out), static_cast<S*>(lse), static_cast<const T*>(qkv), g);
  });
  check_launch("attention_forward");
}

size_t attention_backward_scratch_bytes(int64_t B, int64_t T_, int NH) {
  return static_cast<size_t>(B * NH * T_) * sizeof(float);
}

void attention_backward(DType dt, DType st, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const void* lse, int64_t B, int64_t T_, int64_t hd, int NH,
                        int NKV, const int32_t* doc_start, bool accumulate, void* scratch) {
  if (B <= 0 || T_ <= 0) return;
  Geometry g = geometry(T_, hd, NH, NKV);
  g.doc_start = doc_start;
  g.B = B;
  g.accumulate = accumulate;
  check_geometry(g, "attention_backward");
  float* D = static_cast<float*>(scratch);
  const unsigned tiles = static_cast<unsigned>((T_ + kTile - 1) / kTile);
  const dim3 grid = grid_over(tiles, B * NH);      // dQ: per q head
  const dim3 kv_grid = grid_over(tiles, B * NKV);  // dK/dV: per kv head
  const size_t smem_dq = sizeof(float) * (kTile * g.hd * 2 + kTile * (g.hd + 1) * 2);
  const size_t smem_dkv = smem_dq + sizeof(float) * 2 * kTile + sizeof(int) * kTile;
  by_dtypes(dt, st, "attention_backward", [&](auto t, auto s) {
    using T = decltype(t);
    using S = decltype(s);
    const int64_t rows = B * T_ * NH;
    TRAINRUN_LAUNCH(static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0,
                    attention_delta_kernel<T>)
    (D, static_cast<const T*>(dout), static_cast<const T*>(out), B, g);
    if (tensor_cores(dt, hd)) {
      attention_tc_backward(st, dqkv, dout, qkv, lse, D, B, g);
      return;
    }
    allow_smem(attention_dq_kernel<T, S>, smem_dq, "attention_dq");
    TRAINRUN_LAUNCH(grid, kWarps * 32, smem_dq, attention_dq_kernel<T, S>)
    (static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
     static_cast<const S*>(lse), D, g);
    allow_smem(attention_dkv_kernel<T, S>, smem_dkv, "attention_dkv");
    TRAINRUN_LAUNCH(kv_grid, kWarps * 32, smem_dkv, attention_dkv_kernel<T, S>)
    (static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
     static_cast<const S*>(lse), D, g);
  });
  check_launch("attention_backward");
}

}  // namespace trainrun::cuda
