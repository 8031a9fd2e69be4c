// gpu_check: every op of the CUDA backend, forward and backward, against the CPU reference
// backend, on fresh random inputs at several shapes (odd sizes, head_dim 40 and 128, and
// GPT-2-small's B*T = 8*1024, C = 768, NH = 12, V = 50304), in f32 and in bf16.
//
//   gpu_check [--quick]      (--quick skips the GPT-2-sized shapes)
//
// For each op: the CPU computes in f32 (on the same bf16-rounded values when the GPU runs bf16);
// GPU outputs that an op overwrites are first poisoned with 0xFF bytes (NaN in f32 and bf16), so
// an element the kernel forgets fails; gradients start from the same random values on both
// sides, so accumulation (+=) is checked too. Error metric, per output tensor:
//   max_i |gpu_i - cpu_i| / (|cpu_i| + rms(cpu))
// (relative, with the tensor's RMS as the floor so values near zero do not dominate); any NaN or
// Inf fails. Then each op is timed with CUDA events (mean of 5 after a warm-up) and compared with
// its floor: bytes moved / 4.8 TB/s (H200 HBM3e) or FLOPs / peak (67 TFLOP/s fp32 CUDA cores,
// 989 TFLOP/s bf16 dense tensor cores). Exits 1 if anything failed, 2 if there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/backend.h"

using namespace trainrun;

namespace {

constexpr double kHbmBytesPerS = 4.8e12;
constexpr double kFp32Flops = 67e12;
constexpr double kBf16Flops = 989e12;

uint16_t to_bf16(float f) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>((next() >> 40) * (1.0 / 16777216.0));
  }
};

Tensor make(void* p, DType dt, Device dev, const std::vector<int64_t>& shape) {
  Tensor t;
  t.data = p;
  t.dtype = dt;
  t.device = dev;
  t.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.dims[i] = shape[i];
  return t;
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A float array with a CPU twin: `h` holds the values the CPU reference sees (already rounded to
// bf16 when the GPU copy is bf16), `d` the GPU copy in dtype `dt`.
struct Arr {
  Backend* gpu = nullptr;
  std::vector<int64_t> shape;
  DType dt = DType::f32;
  std::vector<float> h;
  void* d = nullptr;

  Arr(Backend& g, std::vector<int64_t> s, DType t) : gpu(&g), shape(std::move(s)), dt(t) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    h.assign(static_cast<size_t>(n), 0.0f);
    d = gpu->alloc(static_cast<size_t>(n) * dtype_size(dt));
  }
  ~Arr() { gpu->release(d); }
  Arr(const Arr&) = delete;
  Arr& operator=(const Arr&) = delete;

  int64_t n() const { return static_cast<int64_t>(h.size()); }
  size_t bytes() const { return h.size() * dtype_size(dt); }
  Tensor cpu() { return make(h.data(), DType::f32, Device::cpu, shape); }
  Tensor dev() const { return make(d, dt, Device::cuda, shape); }

  Arr& random(Rng& r, float lo = -1.0f, float hi = 1.0f) {
    for (float& x : h) x = r.uniform(lo, hi);
    return upload();
  }
  Arr& upload() {  // rounds h to the GPU dtype, so both sides see the same numbers
    if (dt == DType::bf16) {
      std::vector<uint16_t> b(h.size());
      for (size_t i = 0; i < h.size(); ++i) {
        b[i] = to_bf16(h[i]);
        h[i] = from_bf16(b[i]);
      }
      gpu->copy(dev(), make(b.data(), DType::bf16, Device::cpu, shape));
    } else {
      gpu->copy(dev(), make(h.data(), DType::f32, Device::cpu, shape));
    }
    return *this;
  }
  std::vector<float> download() const {
    std::vector<float> out(h.size());
    if (dt == DType::bf16) {
      std::vector<uint16_t> b(h.size());
      gpu->copy(make(b.data(), DType::bf16, Device::cpu, shape), dev());
      for (size_t i = 0; i < b.size(); ++i) out[i] = from_bf16(b[i]);
    } else {
      gpu->copy(make(out.data(), DType::f32, Device::cpu, shape), dev());
    }
    return out;
  }
  void poison() { cuda_ok(cudaMemset(d, 0xFF, bytes()), "cudaMemset"); }
};

struct IntArr {
  Backend* gpu;
  std::vector<int32_t> h;
  void* d;
  IntArr(Backend& g, int64_t n, Rng& r, int32_t hi) : gpu(&g), h(static_cast<size_t>(n)) {
    for (auto& x : h) x = static_cast<int32_t>(r.next() % static_cast<uint64_t>(hi));
    d = gpu->alloc(h.size() * 4);
    gpu->copy(dev(), cpu());
  }
  ~IntArr() { gpu->release(d); }
  Tensor cpu() { return make(h.data(), DType::i32, Device::cpu, {static_cast<int64_t>(h.size())}); }
  Tensor dev() const { return make(d, DType::i32, Device::cuda, {static_cast<int64_t>(h.size())}); }
};

struct Row {
  std::string op, shape;
  double err, tol;
  bool pass;
  double ms, floor_ms;
};

std::vector<Row> rows;
int failures = 0;

// max_i |a_i - b_i| / (|b_i| + rms(b)); infinity when a has NaN/Inf.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double ss = 0;
  for (float x : b) ss += double(x) * x;
  const double rms = b.empty() ? 0.0 : std::sqrt(ss / double(b.size()));
  const double floor = rms > 0 ? rms : 1e-30;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / (std::fabs(double(b[i])) + floor));
  }
  return worst;
}

// Times f on the GPU: one warm-up, then the mean of 5 calls between CUDA events.
double time_ms(Backend& gpu, const std::function<void()>& f) {
  f();
  gpu.synchronize();
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  cuda_ok(cudaEventRecord(a, nullptr), "cudaEventRecord");
  constexpr int kReps = 5;
  for (int i = 0; i < kReps; ++i) f();
  cuda_ok(cudaEventRecord(b, nullptr), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / kReps;
}

// One checked op: outputs compared (worst error over them), then timed.
void record(const std::string& op, const std::string& shape, double err, double tol, double ms,
            double floor_s) {
  const bool pass = std::isfinite(err) && err <= tol;
  if (!pass) ++failures;
  rows.push_back({op, shape, err, tol, pass, ms, floor_s * 1e3});
  std::printf("%-24s %-34s %10.3g %8.1g  %-4s %9.4f %9.4f\n", op.c_str(), shape.c_str(), err, tol,
              pass ? "PASS" : "FAIL", ms, floor_s * 1e3);
  std::fflush(stdout);
}

struct Shape {
  const char* name;
  int64_t B, T, C;
  int NH;
  int64_t V;
};

std::string shape_str(const Shape& s, DType dt) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s B%ld T%ld C%ld H%d V%ld %s", s.name, long(s.B), long(s.T),
                long(s.C), s.NH, long(s.V), dtype_name(dt));
  return buf;
}

void check_shape(Backend& cpu, Backend& gpu, const Shape& s, DType dt, uint64_t seed) {
  Rng rng{seed};
  const std::string sh = shape_str(s, dt);
  const int64_t N = s.B * s.T, C = s.C, V = s.V;
  const bool bf = dt == DType::bf16;
  const double es = double(dtype_size(dt));
  const double tol_gemm = bf ? 2e-2 : 1e-4, tol_pw = bf ? 2e-2 : 1e-5, tol_exact = bf ? 1e-2 : 1e-6;
  const double tol_red = bf ? 2e-2 : 1e-4, tol_attn = bf ? 3e-2 : 2e-4;
  const double gemm_peak = bf ? kBf16Flops : kFp32Flops;
  const DType st = DType::f32;  // saved statistics stay f32 under bf16 activations

  // ---- matmul, with and without bias ----
  for (const bool with_bias : {true, false}) {
    const int64_t OC = with_bias ? 4 * C : 3 * C;
    Arr in(gpu, {N, C}, dt), w(gpu, {OC, C}, dt), bias(gpu, {OC}, dt), out(gpu, {N, OC}, dt);
    in.random(rng);
    w.random(rng, -0.05f, 0.05f);
    bias.random(rng);
    Tensor cb = with_bias ? bias.cpu() : Tensor(), gb = with_bias ? bias.dev() : Tensor();
    out.poison();
    cpu.matmul(out.cpu(), in.cpu(), w.cpu(), cb);
    gpu.matmul(out.dev(), in.dev(), w.dev(), gb);
    const double flops = 2.0 * N * C * OC;
    const std::string name = with_bias ? "matmul+bias" : "matmul";
    record(name, sh, rel_err(out.download(), out.h), tol_gemm,
           time_ms(gpu, [&] { gpu.matmul(out.dev(), in.dev(), w.dev(), gb); }), flops / gemm_peak);

    Arr dout(gpu, {N, OC}, dt), din(gpu, {N, C}, dt), dw(gpu, {OC, C}, dt), db(gpu, {OC}, dt);
    dout.random(rng, -0.1f, 0.1f);
    din.random(rng);
    dw.random(rng);
    db.random(rng);
    Tensor cdb = with_bias ? db.cpu() : Tensor(), gdb = with_bias ? db.dev() : Tensor();
    cpu.matmul_backward(din.cpu(), dw.cpu(), cdb, dout.cpu(), in.cpu(), w.cpu());
    gpu.matmul_backward(din.dev(), dw.dev(), gdb, dout.dev(), in.dev(), w.dev());
    double e = std::max(rel_err(din.download(), din.h), rel_err(dw.download(), dw.h));
    if (with_bias) e = std::max(e, rel_err(db.download(), db.h));
    record(name + "_backward", sh, e, tol_gemm,
           time_ms(gpu,
                   [&] {
                     gpu.matmul_backward(din.dev(), dw.dev(), gdb, dout.dev(), in.dev(), w.dev());
                   }),
           2 * flops / gemm_peak);
  }

  // ---- layernorm ----
  {
    Arr in(gpu, {N, C}, dt), w(gpu, {C}, dt), b(gpu, {C}, dt), out(gpu, {N, C}, dt);
    Arr mean(gpu, {N}, st), rstd(gpu, {N}, st);
    in.random(rng, -2.0f, 3.0f);
    w.random(rng, 0.5f, 1.5f);
    b.random(rng);
    out.poison();
    mean.poison();
    rstd.poison();
    cpu.layernorm(out.cpu(), mean.cpu(), rstd.cpu(), in.cpu(), w.cpu(), b.cpu());
    gpu.layernorm(out.dev(), mean.dev(), rstd.dev(), in.dev(), w.dev(), b.dev());
    const double e = std::max({rel_err(out.download(), out.h), rel_err(mean.download(), mean.h),
                               rel_err(rstd.download(), rstd.h)});
    record("layernorm", sh, e, tol_red,
           time_ms(gpu,
                   [&] {
                     gpu.layernorm(out.dev(), mean.dev(), rstd.dev(), in.dev(), w.dev(), b.dev());
                   }),
           2.0 * N * C * es / kHbmBytesPerS);

    mean.upload();  // backward from the CPU's statistics on both sides
    rstd.upload();
    Arr dout(gpu, {N, C}, dt), din(gpu, {N, C}, dt), dw(gpu, {C}, dt), db(gpu, {C}, dt);
    dout.random(rng);
    din.random(rng);
    dw.random(rng);
    db.random(rng);
    cpu.layernorm_backward(din.cpu(), dw.cpu(), db.cpu(), dout.cpu(), in.cpu(), w.cpu(), mean.cpu(),
                           rstd.cpu());
    gpu.layernorm_backward(din.dev(), dw.dev(), db.dev(), dout.dev(), in.dev(), w.dev(), mean.dev(),
                           rstd.dev());
    const double eb = std::max({rel_err(din.download(), din.h), rel_err(dw.download(), dw.h),
                                rel_err(db.download(), db.h)});
    record("layernorm_backward", sh, eb, tol_red,
           time_ms(gpu,
                   [&] {
                     gpu.layernorm_backward(din.dev(), dw.dev(), db.dev(), dout.dev(), in.dev(),
                                            w.dev(), mean.dev(), rstd.dev());
                   }),
           5.0 * N * C * es / kHbmBytesPerS);
  }

  // ---- pointwise: gelu, relu, dropout, add, accumulate, scale ----
  {
    const int64_t n = N * 4 * C;
    const double bytes2 = 2.0 * n * es, bytes3 = 3.0 * n * es;
    Arr x(gpu, {n}, dt), y(gpu, {n}, dt), g(gpu, {n}, dt), dx(gpu, {n}, dt);
    x.random(rng, -4.0f, 4.0f);
    g.random(rng);
    auto fwd = [&](const char* op, double tol, const std::function<void(Backend&, Arr&)>& f) {
      y.poison();
      f(cpu, y);
      f(gpu, y);
      record(op, sh, rel_err(y.download(), y.h), tol, time_ms(gpu, [&] { f(gpu, y); }),
             bytes2 / kHbmBytesPerS);
    };
    auto bwd = [&](const char* op, double tol, const std::function<void(Backend&, Arr&)>& f) {
      dx.random(rng);
      f(cpu, dx);
      f(gpu, dx);
      record(op, sh, rel_err(dx.download(), dx.h), tol, time_ms(gpu, [&] { f(gpu, dx); }),
             (bytes3 + n * es) / kHbmBytesPerS);
    };
    auto T = [&](Backend& b, Arr& a) { return b.device() == Device::cpu ? a.cpu() : a.dev(); };
    fwd("gelu", tol_pw, [&](Backend& b, Arr& o) { b.gelu(T(b, o), T(b, x)); });
    bwd("gelu_backward", tol_pw,
        [&](Backend& b, Arr& d) { b.gelu_backward(T(b, d), T(b, g), T(b, x)); });
    fwd("relu", tol_exact, [&](Backend& b, Arr& o) { b.relu(T(b, o), T(b, x)); });
    bwd("relu_backward", tol_exact,
        [&](Backend& b, Arr& d) { b.relu_backward(T(b, d), T(b, g), T(b, x)); });
    fwd("dropout p=0.1", tol_exact,
        [&](Backend& b, Arr& o) { b.dropout(T(b, o), T(b, x), 0.1f, 1234); });
    bwd("dropout_backward", tol_exact,
        [&](Backend& b, Arr& d) { b.dropout_backward(T(b, d), T(b, g), 0.1f, 1234); });
    fwd("add", tol_exact, [&](Backend& b, Arr& o) { b.add(T(b, o), T(b, x), T(b, g)); });
    bwd("accumulate", tol_exact, [&](Backend& b, Arr& d) { b.accumulate(T(b, d), T(b, g)); });
    dx.random(rng);
    cpu.scale(dx.cpu(), 0.37);
    gpu.scale(dx.dev(), 0.37);
    record("scale", sh, rel_err(dx.download(), dx.h), tol_exact,
           time_ms(gpu, [&] { gpu.scale(dx.dev(), 1.0); }), bytes2 / kHbmBytesPerS);
    if (!bf) {  // casts: f32 -> bf16 -> f32 must equal round-to-nearest-even on the host
      Arr half(gpu, {n}, DType::bf16), back(gpu, {n}, DType::f32);
      back.poison();
      gpu.copy(half.dev(), x.dev());
      gpu.copy(back.dev(), half.dev());
      for (int64_t i = 0; i < n; ++i) back.h[size_t(i)] = from_bf16(to_bf16(x.h[size_t(i)]));
      record("cast f32<->bf16", sh, rel_err(back.download(), back.h), 0.0,
             time_ms(gpu, [&] { gpu.copy(half.dev(), x.dev()); }), 6.0 * n / kHbmBytesPerS);
    }
    // reductions (host doubles)
    const double cs = cpu.sum(x.cpu()), gs = gpu.sum(x.dev());
    const double css = cpu.sum_squares(x.cpu()), gss = gpu.sum_squares(x.dev());
    const double scale_s = std::sqrt(css);  // |sum| can be ~0: compare against the RMS scale
    record("sum", sh, std::fabs(gs - cs) / (std::fabs(cs) + scale_s), 1e-6,
           time_ms(gpu, [&] { gpu.sum(x.dev()); }), n * es / kHbmBytesPerS);
    record("sum_squares", sh, std::fabs(gss - css) / std::fabs(css), 1e-6,
           time_ms(gpu, [&] { gpu.sum_squares(x.dev()); }), n * es / kHbmBytesPerS);
  }

  // ---- attention ----
  {
    const int64_t hd = C / s.NH;
    Arr qkv(gpu, {s.B, s.T, 3 * C}, dt), out(gpu, {s.B, s.T, C}, dt);
    Arr lse(gpu, {s.B, s.NH, s.T}, st);
    qkv.random(rng, -1.5f, 1.5f);
    out.poison();
    lse.poison();
    cpu.attention(out.cpu(), lse.cpu(), qkv.cpu(), s.NH);
    gpu.attention(out.dev(), lse.dev(), qkv.dev(), s.NH);
    const double e = std::max(rel_err(out.download(), out.h), rel_err(lse.download(), lse.h));
    const double fwd_flops = 4.0 * s.B * s.NH * double(s.T) * s.T * hd / 2;
    record("attention", sh, e, tol_attn,
           time_ms(gpu, [&] { gpu.attention(out.dev(), lse.dev(), qkv.dev(), s.NH); }),
           fwd_flops / kFp32Flops);
    out.upload();  // the backward starts from the CPU's out/lse on both sides
    lse.upload();
    Arr dout(gpu, {s.B, s.T, C}, dt), dqkv(gpu, {s.B, s.T, 3 * C}, dt);
    dout.random(rng);
    dqkv.random(rng);
    cpu.attention_backward(dqkv.cpu(), dout.cpu(), qkv.cpu(), out.cpu(), lse.cpu(), s.NH);
    gpu.attention_backward(dqkv.dev(), dout.dev(), qkv.dev(), out.dev(), lse.dev(), s.NH);
    record("attention_backward", sh, rel_err(dqkv.download(), dqkv.h), tol_attn,
           time_ms(gpu,
                   [&] {
                     gpu.attention_backward(dqkv.dev(), dout.dev(), qkv.dev(), out.dev(), lse.dev(),
                                            s.NH);
                   }),
           2.5 * fwd_flops / kFp32Flops);
  }

  // ---- embedding ----
  {
    IntArr ids(gpu, N, rng, static_cast<int32_t>(V));
    Arr table(gpu, {V, C}, dt), out(gpu, {N, C}, dt);
    table.random(rng);
    out.poison();
    cpu.embedding(out.cpu(), ids.cpu(), table.cpu());
    gpu.embedding(out.dev(), ids.dev(), table.dev());
    record("embedding", sh, rel_err(out.download(), out.h), 0.0,
           time_ms(gpu, [&] { gpu.embedding(out.dev(), ids.dev(), table.dev()); }),
           2.0 * N * C * es / kHbmBytesPerS);
    if (!bf) {  // the table gradient accumulates in f32 only
      Arr dout(gpu, {N, C}, dt), dtable(gpu, {V, C}, dt);
      dout.random(rng);
      dtable.random(rng);
      cpu.embedding_backward(dtable.cpu(), dout.cpu(), ids.cpu());
      gpu.embedding_backward(dtable.dev(), dout.dev(), ids.dev());
      record("embedding_backward", sh, rel_err(dtable.download(), dtable.h), 1e-5,
             time_ms(gpu, [&] { gpu.embedding_backward(dtable.dev(), dout.dev(), ids.dev()); }),
             3.0 * N * C * es / kHbmBytesPerS);
    }
  }

  // ---- cross-entropy ----
  {
    IntArr targets(gpu, N, rng, static_cast<int32_t>(V));
    Arr logits(gpu, {N, V}, dt), losses(gpu, {N}, st), lse(gpu, {N}, st), dl(gpu, {N, V}, dt);
    logits.random(rng, -4.0f, 4.0f);
    losses.poison();
    lse.poison();
    cpu.cross_entropy(losses.cpu(), lse.cpu(), logits.cpu(), targets.cpu());
    gpu.cross_entropy(losses.dev(), lse.dev(), logits.dev(), targets.dev());
    const double e = std::max(rel_err(losses.download(), losses.h), rel_err(lse.download(), lse.h));
    record(
        "cross_entropy", sh, e, bf ? 2e-2 : 1e-5,
        time_ms(gpu,
                [&] { gpu.cross_entropy(losses.dev(), lse.dev(), logits.dev(), targets.dev()); }),
        double(N) * V * es / kHbmBytesPerS);
    lse.upload();
    const float scale = 1.0f / float(N);
    dl.poison();
    cpu.cross_entropy_backward(dl.cpu(), logits.cpu(), lse.cpu(), targets.cpu(), scale);
    gpu.cross_entropy_backward(dl.dev(), logits.dev(), lse.dev(), targets.dev(), scale);
    record("cross_entropy_backward", sh, rel_err(dl.download(), dl.h), bf ? 2e-2 : 1e-5,
           time_ms(gpu,
                   [&] {
                     gpu.cross_entropy_backward(dl.dev(), logits.dev(), lse.dev(), targets.dev(),
                                                scale);
                   }),
           2.0 * N * V * es / kHbmBytesPerS);
    // in place (dlogits aliases logits), as the trainer uses it
    gpu.cross_entropy_backward(logits.dev(), logits.dev(), lse.dev(), targets.dev(), scale);
    record("cross_entropy_bwd inplace", sh, rel_err(logits.download(), dl.h), bf ? 2e-2 : 1e-5, 0.0,
           0.0);
  }

  // ---- AdamW (f32 parameter state) ----
  if (!bf) {
    const int64_t n = 12 * C * C + 3;  // odd length: the tail is covered
    Arr p(gpu, {n}, DType::f32), g(gpu, {n}, DType::f32), m(gpu, {n}, DType::f32),
        v(gpu, {n}, DType::f32);
    p.random(rng);
    g.random(rng, -0.01f, 0.01f);
    m.random(rng, -0.001f, 0.001f);
    v.random(rng, 0.0f, 1e-5f);
    AdamWParams hp;
    hp.lr = 3e-4f;
    hp.weight_decay = 0.1f;
    hp.step = 7;
    cpu.adamw(p.cpu(), g.cpu(), m.cpu(), v.cpu(), hp);
    gpu.adamw(p.dev(), g.dev(), m.dev(), v.dev(), hp);
    const double e = std::max(
        {rel_err(p.download(), p.h), rel_err(m.download(), m.h), rel_err(v.download(), v.h)});
    record("adamw", sh, e, 1e-5,
           time_ms(gpu, [&] { gpu.adamw(p.dev(), g.dev(), m.dev(), v.dev(), hp); }),
           28.0 * n / kHbmBytesPerS);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::string why;
  auto gpu = make_cuda_backend(0, &why);
  if (!gpu) {
    std::fprintf(stderr, "gpu_check: no CUDA backend: %s\n", why.c_str());
    return 2;
  }
  auto cpu = make_cpu_backend();
  std::printf("gpu_check: %s against %s\n\n", gpu->describe().c_str(), cpu->describe().c_str());
  std::printf("%-24s %-34s %10s %8s  %-4s %9s %9s\n", "op", "shape", "max rel", "tol", "", "gpu ms",
              "floor ms");

  const std::vector<Shape> shapes = {
      {"tiny", 1, 7, 32, 1, 11},        // shorter than one tile
      {"odd", 3, 67, 96, 3, 1001},      // hd 32, T not a tile multiple
      {"hd40", 2, 129, 80, 2, 333},     // hd not a multiple of 32
      {"hd128", 1, 256, 256, 2, 4096},  // the largest head_dim
  };
  const Shape gpt2{"gpt2", 8, 1024, 768, 12, 50304};
  uint64_t seed = 1;
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const Shape& s : shapes) check_shape(*cpu, *gpu, s, dt, seed++);
    if (!quick) check_shape(*cpu, *gpu, gpt2, dt, seed++);
  }

  std::printf("\n%zu checks, %d failed\n", rows.size(), failures);
  for (const Row& r : rows)
    if (!r.pass)
      std::printf("FAILED: %s %s (err %.3g > tol %.1g)\n", r.op.c_str(), r.shape.c_str(), r.err,
                  r.tol);
  return failures ? 1 : 0;
}
